#pragma once
// GPT-2's MLP GEMMs with the GELU in cuBLASLt's epilogue (gemm_epilogue_cuda.cu):
// the forward GEMM writes both the pre-activation and its tanh-GELU, the
// backward's input-gradient GEMM multiplies by GELU's derivative and sums the
// bias gradient as it stores. Each replaces a separate elementwise pass over
// [rows, ffn] (about 5% of gpt2-350m's step at seq 2048 was those two passes).
// Row-major operands in one 16-bit dtype, fp32 accumulation; plain pointers,
// no torch headers, so nvcc compiles only this.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/nn/cross_entropy_cuda.h"  // Dtype

namespace stratum::nn::cuda {

// Scratch for cuBLASLt's kernels, handed in by the caller.
struct GemmWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// pre = x wᵀ + bias and act = gelu_tanh(pre), one GEMM: x [rows, in],
// w [out, in], bias [out]; pre and act [rows, out], contiguous.
// Returns false (nothing launched) where cuBLASLt has no kernel for it: the
// caller computes it another way. Throws std::runtime_error on a cuBLAS failure.
bool gemm_bias_gelu(const void* x, const void* w, const void* bias, int64_t rows, int64_t in, int64_t out,
                    Dtype dtype, void* pre, void* act, GemmWorkspace ws, cudaStream_t stream);

// dh = (dy w) * gelu_tanh'(pre) and dbias = dh summed over rows, one GEMM:
// dy [rows, out], w [out, in], pre [rows, in]; dh [rows, in], dbias [in].
// Same contract as gemm_bias_gelu.
bool gemm_gelu_backward(const void* dy, const void* w, const void* pre, int64_t rows, int64_t out, int64_t in,
                        Dtype dtype, void* dh, void* dbias, GemmWorkspace ws, cudaStream_t stream);

}  // namespace stratum::nn::cuda
