// See wire_cast_cuda.h. Eight 16-bit values per thread and step: one 16-byte
// load, two 16-byte stores; the unaligned head or tail one at a time.
#include "stratum/zero/wire_cast_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "stratum/core/cuda_float_convert.cuh"

namespace stratum::zero::cuda {
namespace {

using cuda_detail::widen;

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) widen_kernel(const T* src, float* dst, int64_t n, bool packed) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (packed) {
    const int64_t packs = n / 8;
    for (int64_t i = first; i < packs; i += stride) {
      const uint4 raw = reinterpret_cast<const uint4*>(src)[i];
      const T* v = reinterpret_cast<const T*>(&raw);
      float4* out = reinterpret_cast<float4*>(dst) + 2 * i;
      out[0] = make_float4(widen<T>(v[0]), widen<T>(v[1]), widen<T>(v[2]), widen<T>(v[3]));
      out[1] = make_float4(widen<T>(v[4]), widen<T>(v[5]), widen<T>(v[6]), widen<T>(v[7]));
    }
    for (int64_t i = packs * 8 + first; i < n; i += stride) dst[i] = widen<T>(src[i]);
  } else {
    for (int64_t i = first; i < n; i += stride) dst[i] = widen<T>(src[i]);
  }
}

}  // namespace

cudaError_t launch_widen_to_float(const void* src, bool bf16, float* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool packed = reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t wanted = ((packed ? n / 8 : n) + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sms} * 16)));
  if (bf16)
    widen_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), dst, n,
                                                                  packed);
  else
    widen_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(src), dst, n, packed);
  return cudaGetLastError();
}

}  // namespace stratum::zero::cuda
