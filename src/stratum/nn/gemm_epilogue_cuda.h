#pragma once
// GPT-2's first MLP GEMM with the GELU in cuBLASLt's epilogue
// (gemm_epilogue_cuda.cu): one GEMM writes the pre-activation and its
// tanh-GELU, where a separate pass over [rows, ffn] read one and wrote the
// other (gpt2-350m seq 2048: the forward 2.3 ms, 8%, faster).
// The backward's counterpart, DGELU_BGRAD on the input-gradient GEMM, is
// not used: cuBLASLt 13 runs it as a separate global epilogue kernel, 0.59 ms
// a layer there against 0.13 ms for nn/'s fused GELU-backward kernel.
// Row-major operands in one 16-bit dtype, fp32 accumulation; plain pointers,
// no torch headers, so nvcc compiles only this.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::nn::cuda {

using stratum::cuda::Dtype;

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

}  // namespace stratum::nn::cuda
