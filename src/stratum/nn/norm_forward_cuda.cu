// RMSNorm's and LayerNorm's forward with the output's amax; see
// norm_forward_cuda.h. One warp a row: a row of a model's width (2 to 16 KB
// in 16-bit) is read from memory once and again from the cache for the
// statistics' second pass and the output; 16 bytes an access where the
// pointers are aligned and the width is a multiple of that pack.
#include "stratum/nn/norm_forward_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "stratum/core/cuda_float_convert.cuh"
#include "stratum/core/cuda_kernel_util.cuh"

namespace stratum::nn::cuda {
namespace {

using cuda_detail::aligned_to;
using cuda_detail::capped_grid;
using cuda_detail::Elems;
using cuda_detail::kPack;
using cuda_detail::load;
using cuda_detail::narrow_to;
using cuda_detail::store;
using cuda_detail::warp_sum;
using cuda_detail::widen;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// kLayer: LayerNorm (centred, with beta); else RMSNorm. The output is
// gamma * (rstd * (x - mean)) + beta in fp32, ATen's order, rounded once.
template <typename T, int N, bool kLayer>
__global__ void __launch_bounds__(kThreads) norm_forward_kernel(NormForward a) {
  const T* x = static_cast<const T*>(a.x);
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  T* y = static_cast<T*>(a.y);
  const int lane = threadIdx.x % 32;
  const float inv_cols = 1.f / static_cast<float>(a.cols);
  int m = 0;
  for (int64_t r = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; r < a.rows; r += int64_t{gridDim.x} * kWarps) {
    const T* row = x + r * a.cols;
    float mean = 0.f;
    if constexpr (kLayer) {
      float sum = 0.f;
      for (int64_t c = lane * N; c < a.cols; c += 32 * N) {
        const Elems<T, N> v = load<T, N>(row + c);
#pragma unroll
        for (int k = 0; k < N; ++k) sum += widen<T>(v.v[k]);
      }
      mean = warp_sum(sum) * inv_cols;
    }
    float squares = 0.f;  // two passes: the variance without Welford's updates, as accurate
    for (int64_t c = lane * N; c < a.cols; c += 32 * N) {
      const Elems<T, N> v = load<T, N>(row + c);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float d = widen<T>(v.v[k]) - mean;
        squares += d * d;
      }
    }
    const float rstd = rsqrtf(warp_sum(squares) * inv_cols + a.eps);
    if (lane == 0) {
      if constexpr (kLayer) a.mean[r] = mean;
      a.rstd[r] = rstd;
    }
    for (int64_t c = lane * N; c < a.cols; c += 32 * N) {
      const Elems<T, N> v = load<T, N>(row + c), g = load<T, N>(gamma + c);
      Elems<T, N> b;
      if constexpr (kLayer) b = load<T, N>(beta + c);
      Elems<T, N> out;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        float o = widen<T>(g.v[k]) * (rstd * (widen<T>(v.v[k]) - mean));
        if constexpr (kLayer) o += widen<T>(b.v[k]);
        out.v[k] = narrow_to<T>(o);
        m = max(m, __float_as_int(fabsf(widen<T>(out.v[k]))));  // of the stored (rounded) value
      }
      store<T, N>(y + r * a.cols + c, out);
    }
  }
  if (a.amax != nullptr) {  // the same for the whole grid
    m = cuda_detail::block_max(m);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(a.amax), m);
  }
}

template <typename T, int N>
cudaError_t launch_as(const NormForward& a, cudaStream_t stream) {
  const unsigned blocks = capped_grid(a.rows, kWarps, 32);
  if (a.beta != nullptr)
    norm_forward_kernel<T, N, true><<<blocks, kThreads, 0, stream>>>(a);
  else
    norm_forward_kernel<T, N, false><<<blocks, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const NormForward& a, cudaStream_t stream) {
  constexpr int N = kPack<T>;
  const bool packable = a.cols % N == 0 && aligned_to(a.x, 16) && aligned_to(a.y, 16) && aligned_to(a.gamma, 16) &&
                        (a.beta == nullptr || aligned_to(a.beta, 16));
  return packable ? launch_as<T, N>(a, stream) : launch_as<T, 1>(a, stream);
}

}  // namespace

cudaError_t launch_norm_forward(const NormForward& a, Dtype dtype, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (a.cols <= 0 || a.x == nullptr || a.gamma == nullptr || a.y == nullptr || a.rstd == nullptr ||
      (a.beta != nullptr && a.mean == nullptr))
    return cudaErrorInvalidValue;
  switch (dtype) {
    case Dtype::bf16: return launch_typed<__nv_bfloat16>(a, stream);
    case Dtype::f16: return launch_typed<__half>(a, stream);
    case Dtype::f32: return launch_typed<float>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace stratum::nn::cuda
