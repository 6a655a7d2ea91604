// Cross-entropy over rows of 16-bit (or fp32) logits, one thread block per
// row: the forward makes one pass (an online max and sum of exponentials),
// the backward one pass writing the gradient in the logits' dtype. torch's
// path widens the logits to fp32 and runs several full-size kernels.
#include "stratum/nn/cross_entropy_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "stratum/core/cuda_float_convert.cuh"
#include <math_constants.h>

namespace stratum::nn::cuda {
namespace {

constexpr int kThreads = 512;

using cuda_detail::narrow_to;
using cuda_detail::widen;

// (max, sum of exp(x - max)) pairs combine associatively.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  if (m2 == -CUDART_INF_F) return;
  if (m == -CUDART_INF_F) {
    m = m2;
    s = s2;
    return;
  }
  const float hi = fmaxf(m, m2);
  s = s * __expf(m - hi) + s2 * __expf(m2 - hi);
  m = hi;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) forward_kernel(CrossEntropyRows a, float* logp) {
  const int64_t r = blockIdx.x;
  const T* row = static_cast<const T*>(a.logits) + r * a.row_stride;
  float m = -CUDART_INF_F, s = 0.f;
  for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) {
    const float x = widen<T>(row[j]);
    if (x > m) {
      s = s * __expf(m - x) + 1.f;
      m = x;
    } else if (x != -CUDART_INF_F) {
      s += __expf(x - m);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2)
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  __shared__ float ms[kThreads / 32], ss[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    ms[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = ms[0], bs = ss[0];
    for (int w = 1; w < kThreads / 32; ++w) combine(bm, bs, ms[w], ss[w]);
    const float lse = bm + __logf(bs);
    a.lse[r] = lse;
    const int64_t t = a.targets[r];
    logp[r] = t == a.ignore_index           ? 0.f
              : (t < 0 || t >= a.vocab) ? CUDART_NAN_F  // an out-of-range target poisons the loss
                                        : widen<T>(row[t]) - lse;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) backward_kernel(CrossEntropyRows a, const float* scale, T* grad,
                                                            int64_t grad_row_stride) {
  const int64_t r = blockIdx.x;
  const T* row = static_cast<const T*>(a.logits) + r * a.row_stride;
  T* out = grad + r * grad_row_stride;
  const int64_t t = a.targets[r];
  const float k = t == a.ignore_index ? 0.f : *scale;
  const float lse = a.lse[r];
  for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) {
    const float p = __expf(widen<T>(row[j]) - lse);
    out[j] = narrow_to<T>((p - (j == t ? 1.f : 0.f)) * k);
  }
}

}  // namespace

cudaError_t launch_cross_entropy_forward(const CrossEntropyRows& a, float* logp, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(a.rows));
  switch (a.dtype) {
    case Dtype::bf16: forward_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a, logp); break;
    case Dtype::f16: forward_kernel<__half><<<grid, kThreads, 0, stream>>>(a, logp); break;
    case Dtype::f32: forward_kernel<float><<<grid, kThreads, 0, stream>>>(a, logp); break;
  }
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_backward(const CrossEntropyRows& a, const float* scale, void* grad,
                                          int64_t grad_row_stride, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(a.rows));
  switch (a.dtype) {
    case Dtype::bf16:
      backward_kernel<<<grid, kThreads, 0, stream>>>(a, scale, static_cast<__nv_bfloat16*>(grad), grad_row_stride);
      break;
    case Dtype::f16:
      backward_kernel<<<grid, kThreads, 0, stream>>>(a, scale, static_cast<__half*>(grad), grad_row_stride);
      break;
    case Dtype::f32:
      backward_kernel<<<grid, kThreads, 0, stream>>>(a, scale, static_cast<float*>(grad), grad_row_stride);
      break;
  }
  return cudaGetLastError();
}

}  // namespace stratum::nn::cuda
