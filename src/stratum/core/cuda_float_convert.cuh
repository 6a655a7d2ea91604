#pragma once
// Device-side conversions between fp32 and the 16-bit float types, for
// Stratum's kernels that read bf16/fp16/fp32 and compute in fp32 (nvcc only).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace stratum::cuda_detail {

template <typename T> __device__ __forceinline__ float widen(T x);
template <> __device__ __forceinline__ float widen<float>(float x) { return x; }
template <> __device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float widen<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T narrow_to(float x);
template <> __device__ __forceinline__ float narrow_to<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 narrow_to<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half narrow_to<__half>(float x) { return __float2half(x); }

}  // namespace stratum::cuda_detail
