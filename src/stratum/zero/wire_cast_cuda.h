#pragma once
// The widening copy of 16-bit gradients into their fp32 slots (the wire's
// dtype) as autograd delivers them (wire_cast_cuda.cu). ATen runs a dtype-converting copy one
// element per access (its vectorized path needs one dtype); this moves 16
// bytes per load. Plain pointers, no torch headers, so nvcc compiles only this.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::zero::cuda {

using stratum::cuda::Dtype;

// dst[i] = float(src[i]) for i < n; src is bf16 or fp16 (`dtype`; fp32:
// cudaErrorInvalidValue, nothing launched).
cudaError_t launch_widen_to_float(const void* src, Dtype dtype, float* dst, int64_t n, cudaStream_t stream);

}  // namespace stratum::zero::cuda
