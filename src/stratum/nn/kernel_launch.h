#pragma once
// Host-side glue shared by nn/'s CUDA kernels (cross-entropy, fused
// elementwise): the dtype tag of a tensor, the current stream, and a failed
// launch as a stratum::Error. Include only under STRATUM_WITH_CUDA_KERNELS.
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

#include "stratum/core/error.h"
#include "stratum/nn/cross_entropy_cuda.h"  // Dtype

namespace stratum::nn::cuda {

inline Dtype dtype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? Dtype::bf16 : t.scalar_type() == at::kHalf ? Dtype::f16 : Dtype::f32;
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// `what` names the operation and the kernel, e.g. "chunked_cross_entropy: forward kernel".
inline void check_launch(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(what + ": " + cudaGetErrorString(e));
}

}  // namespace stratum::nn::cuda
