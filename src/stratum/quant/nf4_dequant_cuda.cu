// See nf4_dequant_cuda.h.
#include "stratum/quant/nf4_dequant_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "stratum/core/cuda_float_convert.cuh"
#include "stratum/core/cuda_kernel_util.cuh"

namespace stratum::quant::cuda {
namespace {

using cuda_detail::Elems;
using cuda_detail::narrow_to;

constexpr int kThreads = 256;

__device__ __forceinline__ float block_scale(const Nf4View& q, int64_t block) {
  if (!q.absmax_codes) return q.absmax[block];
  // (code x scale) + offset, rounded apart as the CPU path rounds them.
  return __fadd_rn(__fmul_rn(q.nested_code[q.absmax_codes[block]], q.nested_absmax[block / q.nested_blocksize]),
                   q.offset);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(Nf4View q, T* out) {
  __shared__ float kCode[16];  // NF4's code book (quant::nf4_code(), from the host)
  if (threadIdx.x < 16) kCode[threadIdx.x] = q.code[threadIdx.x];
  __syncthreads();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  // 8 values (4 bytes) a thread: a block of >= 32 values holds them all.
  const int64_t groups = q.n / 8;
  for (int64_t g = first; g < groups; g += stride) {
    const uint32_t bytes = *reinterpret_cast<const uint32_t*>(q.packed + 4 * g);
    const float scale = block_scale(q, (8 * g) / q.blocksize);
    Elems<T, 8> v;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t b = (bytes >> (8 * k)) & 0xFF;
      v.v[2 * k] = narrow_to<T>(__fmul_rn(kCode[b >> 4], scale));
      v.v[2 * k + 1] = narrow_to<T>(__fmul_rn(kCode[b & 0x0F], scale));
    }
    cuda_detail::store<T, 8>(out + 8 * g, v);
  }
  for (int64_t i = groups * 8 + first; i < q.n; i += stride) {
    const uint32_t b = q.packed[i / 2];
    const float c = kCode[i % 2 == 0 ? b >> 4 : b & 0x0F];
    out[i] = narrow_to<T>(__fmul_rn(c, block_scale(q, i / q.blocksize)));
  }
}

}  // namespace

cudaError_t launch_nf4_dequantize(const Nf4View& q, void* out, Dtype dtype, cudaStream_t stream) {
  if (q.n == 0) return cudaSuccess;
  // 4-byte loads and 8-value stores need aligned buffers (fresh allocations are).
  if (!cuda_detail::aligned_to(q.packed, 4) || !cuda_detail::aligned_to(out, 32) || q.blocksize < 32)
    return cudaErrorInvalidValue;
  const unsigned blocks = cuda_detail::capped_grid(q.n / 8 + 1, kThreads, 16);
  switch (dtype) {
    case Dtype::bf16:
      dequantize_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(q, static_cast<__nv_bfloat16*>(out));
      break;
    case Dtype::f16: dequantize_kernel<__half><<<blocks, kThreads, 0, stream>>>(q, static_cast<__half*>(out)); break;
    case Dtype::f32: dequantize_kernel<float><<<blocks, kThreads, 0, stream>>>(q, static_cast<float*>(out)); break;
  }
  return cudaGetLastError();
}

}  // namespace stratum::quant::cuda
