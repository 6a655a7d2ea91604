// See wire_cast_cuda.h. Eight 16-bit values per thread and step: one 16-byte
// load, two 16-byte stores; unaligned buffers, and the tail, one at a time.
#include "stratum/zero/wire_cast_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "stratum/core/cuda_float_convert.cuh"
#include "stratum/core/cuda_kernel_util.cuh"

namespace stratum::zero::cuda {
namespace {

using cuda_detail::Elems;
using cuda_detail::widen;

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) widen_kernel(const T* src, float* dst, int64_t n, bool packed) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (packed) {
    const int64_t packs = n / 8;
    for (int64_t i = first; i < packs; i += stride) {
      const Elems<T, 8> v = cuda_detail::load<T, 8>(src + 8 * i);
      Elems<float, 4> lo, hi;
      for (int k = 0; k < 4; ++k) lo.v[k] = widen<T>(v.v[k]), hi.v[k] = widen<T>(v.v[4 + k]);
      cuda_detail::store<float, 4>(dst + 8 * i, lo);
      cuda_detail::store<float, 4>(dst + 8 * i + 4, hi);
    }
    for (int64_t i = packs * 8 + first; i < n; i += stride) dst[i] = widen<T>(src[i]);
  } else {
    for (int64_t i = first; i < n; i += stride) dst[i] = widen<T>(src[i]);
  }
}

}  // namespace

cudaError_t launch_widen_to_float(const void* src, Dtype dtype, float* dst, int64_t n, cudaStream_t stream) {
  if (dtype == Dtype::f32) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const bool packed = cuda_detail::aligned_to(src, 16) && cuda_detail::aligned_to(dst, 16);
  const unsigned blocks = cuda_detail::capped_grid(packed ? n / 8 : n, kThreads, 16);
  if (dtype == Dtype::bf16)
    widen_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), dst, n,
                                                                  packed);
  else
    widen_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(src), dst, n, packed);
  return cudaGetLastError();
}

}  // namespace stratum::zero::cuda
