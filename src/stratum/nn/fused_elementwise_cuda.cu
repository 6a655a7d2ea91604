// SwiGLU, RoPE, LayerNorm's backward, bias gradients and the tanh-GELU
// backward as one kernel each (two for column sums); see fused_elementwise_cuda.h. Column sums are deterministic: each block sums a
// tile of rows into its own row of the workspace, and a second kernel adds
// those rows in a fixed order (no atomics), as ATen's sum does.
#include "stratum/nn/fused_elementwise_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "stratum/core/cuda_float_convert.cuh"

namespace stratum::nn::cuda {
namespace {

using cuda_detail::narrow_to;
using cuda_detail::widen;

constexpr int kColsPerBlock = 32;   // threadIdx.x: one warp reads 32 adjacent elements of a row
constexpr int kRowLanes = 8;        // threadIdx.y
constexpr int kRowsPerBlock = 256;  // rows one block sums
constexpr int kThreads = 256;       // elementwise kernels

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// Grid-stride over rows (y) and columns (x) of a [rows, cols] problem.
#define STRATUM_FOR_EACH_ROW_COL(rows, cols)                                     \
  for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)                      \
    for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < (cols); \
         c += int64_t{gridDim.x} * blockDim.x)

template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(Matrix gu, T* out) {
  const int64_t f = gu.cols / 2;
  const T* in = static_cast<const T*>(gu.data);
  STRATUM_FOR_EACH_ROW_COL(gu.rows, f) {
    const float g = widen<T>(in[r * gu.ld + c]);
    const float u = widen<T>(in[r * gu.ld + f + c]);
    out[r * f + c] = narrow_to<T>(g * sigmoid(g) * u);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(Matrix gu, const T* d_out, T* d_gu) {
  const int64_t f = gu.cols / 2;
  const T* in = static_cast<const T*>(gu.data);
  STRATUM_FOR_EACH_ROW_COL(gu.rows, f) {
    const float g = widen<T>(in[r * gu.ld + c]);
    const float u = widen<T>(in[r * gu.ld + f + c]);
    const float d = widen<T>(d_out[r * f + c]);
    const float s = sigmoid(g);
    d_gu[r * 2 * f + c] = narrow_to<T>(d * u * s * (1.f + g * (1.f - s)));
    d_gu[r * 2 * f + f + c] = narrow_to<T>(d * g * s);
  }
}

// Element (r, c) of the matrix whose columns are summed.
template <typename T>
struct ReadElement {
  const T* data;
  int64_t ld;
  __device__ float operator()(int64_t r, int64_t c) const { return widen<T>(data[r * ld + c]); }
};

// dh = dy * gelu_tanh'(h), ATen's formula in fp32; stores dh and returns it as stored.
template <typename T>
struct GeluTanhBackward {
  const T *dy, *h;
  T* dh;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    const int64_t i = r * cols + c;
    const float x = widen<T>(h[i]);
    const float x_sq = x * x;
    const float t = tanhf(kBeta * (x + kKappa * x_sq * x));
    const float derivative = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * x_sq);
    const T out = narrow_to<T>(widen<T>(dy[i]) * derivative);
    dh[i] = out;
    return widen<T>(out);
  }
};

// Block (x, y) sums rows [y * kRowsPerBlock, ...) of columns [x * kColsPerBlock, ...)
// into workspace[y * cols + c].
template <typename Op>
__global__ void __launch_bounds__(kColsPerBlock * kRowLanes)
    column_partial_sums(int64_t rows, int64_t cols, Op op, float* workspace) {
  const int64_t c = blockIdx.x * int64_t{kColsPerBlock} + threadIdx.x;
  const int64_t r0 = blockIdx.y * int64_t{kRowsPerBlock};
  const int64_t r1 = r0 + kRowsPerBlock < rows ? r0 + kRowsPerBlock : rows;
  float acc = 0.f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += op(r, c);
  __shared__ float part[kRowLanes][kColsPerBlock + 1];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.f;
    for (int i = 0; i < kRowLanes; ++i) s += part[i][threadIdx.x];
    workspace[blockIdx.y * cols + c] = s;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) finish_column_sums(int64_t tiles, int64_t cols, const float* workspace,
                                                                 T* out) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x) {
    float s = 0.f;
    for (int64_t t = 0; t < tiles; ++t) s += workspace[t * cols + c];
    out[c] = narrow_to<T>(s);
  }
}

// Sum over the block (kThreads threads) of one value per thread, returned to all.
__device__ float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) layer_norm_backward_input_kernel(LayerNormBackward a) {
  __shared__ float scratch[kThreads / 32];
  const T* h = static_cast<const T*>(a.h);
  const T* dy = static_cast<const T*>(a.dy);
  const T* dh_ext = static_cast<const T*>(a.dh_ext);
  const T* gamma = static_cast<const T*>(a.gamma);
  T* dh = static_cast<T*>(a.dh);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const float mean = a.mean[r], rstd = a.rstd[r];
    const int64_t base = r * a.cols;
    float sum_g = 0.f, sum_gx = 0.f;
    for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
      const float g = widen<T>(dy[base + c]) * widen<T>(gamma[c]);
      sum_g += g;
      sum_gx += g * (widen<T>(h[base + c]) - mean) * rstd;
    }
    const float mean_g = block_sum(sum_g, scratch) / a.cols;
    const float mean_gx = block_sum(sum_gx, scratch) / a.cols;
    for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
      const float g = widen<T>(dy[base + c]) * widen<T>(gamma[c]);
      const float xhat = (widen<T>(h[base + c]) - mean) * rstd;
      float out = rstd * (g - mean_g - xhat * mean_gx);
      if (dh_ext) out += widen<T>(dh_ext[base + c]);
      dh[base + c] = narrow_to<T>(out);
    }
  }
}

template <typename T>
struct DyTimesXhat {
  const T *dy, *h;
  const float *mean, *rstd;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    const int64_t i = r * cols + c;
    return widen<T>(dy[i]) * (widen<T>(h[i]) - mean[r]) * rstd[r];
  }
};

// One thread per (row, pair): reads x[d] and x[d + D/2], writes both outputs.
template <typename T>
__global__ void __launch_bounds__(kThreads) rotary_kernel(Rotary a) {
  const int64_t half = a.size[3] / 2, n_heads = a.size[1], seq = a.size[2];
  const int64_t pairs = a.size[0] * n_heads * seq * half;
  const T* x = static_cast<const T*>(a.x);
  const T* cos = static_cast<const T*>(a.cos);
  const T* sin = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pairs; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % half, row = i / half;
    const int64_t t = row % seq, h = (row / seq) % n_heads, b = row / (seq * n_heads);
    const int64_t xi = b * a.x_stride[0] + h * a.x_stride[1] + t * a.x_stride[2] + d;
    const int64_t yi = b * a.y_stride[0] + h * a.y_stride[1] + t * a.y_stride[2] + d;
    const int64_t ti = t * a.size[3] + d;
    const float lo = widen<T>(x[xi]), hi = widen<T>(x[xi + half]);
    const float c_lo = widen<T>(cos[ti]), c_hi = widen<T>(cos[ti + half]);
    const float s_lo = widen<T>(sin[ti]), s_hi = widen<T>(sin[ti + half]);
    if (!a.transpose) {
      y[yi] = narrow_to<T>(lo * c_lo - hi * s_lo);
      y[yi + half] = narrow_to<T>(hi * c_hi + lo * s_hi);
    } else {
      y[yi] = narrow_to<T>(lo * c_lo + hi * s_hi);
      y[yi + half] = narrow_to<T>(hi * c_hi - lo * s_lo);
    }
  }
}

int64_t row_tiles(int64_t rows) { return (rows + kRowsPerBlock - 1) / kRowsPerBlock; }

dim3 elementwise_grid(int64_t rows, int64_t cols) {
  const int64_t x = (cols + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(x < 64 ? x : 64), static_cast<unsigned>(rows < 8192 ? rows : 8192));
}

template <typename T, typename Op>
cudaError_t column_sums(int64_t rows, int64_t cols, Op op, float* workspace, void* out, cudaStream_t stream) {
  const int64_t tiles = row_tiles(rows);
  const dim3 grid(static_cast<unsigned>((cols + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(tiles));
  if (tiles > 0) column_partial_sums<<<grid, dim3(kColsPerBlock, kRowLanes), 0, stream>>>(rows, cols, op, workspace);
  const int64_t blocks = (cols + kThreads - 1) / kThreads;
  finish_column_sums<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(tiles, cols, workspace,
                                                                                 static_cast<T*>(out));
  return cudaGetLastError();
}

template <typename F>
cudaError_t by_dtype(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::bf16: return f(__nv_bfloat16{});
    case Dtype::f16: return f(__half{});
    case Dtype::f32: return f(float{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_layer_norm_backward_input(const LayerNormBackward& a, Dtype dtype, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(a.rows < 65535 ? a.rows : 65535);
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    layer_norm_backward_input_kernel<T><<<blocks, kThreads, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t launch_layer_norm_backward_params(const LayerNormBackward& a, Dtype dtype, float* workspace,
                                              void* gamma_grad, void* beta_grad, cudaStream_t stream) {
  if (a.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* dy = static_cast<const T*>(a.dy);
    const DyTimesXhat<T> dgamma{dy, static_cast<const T*>(a.h), a.mean, a.rstd, a.cols};
    if (cudaError_t e = column_sums<T>(a.rows, a.cols, dgamma, workspace, gamma_grad, stream); e != cudaSuccess)
      return e;
    // The workspace is reused: stream order puts the second pass after the first's finish.
    return column_sums<T>(a.rows, a.cols, ReadElement<T>{dy, a.cols}, workspace, beta_grad, stream);
  });
}

cudaError_t launch_rotary(const Rotary& r, Dtype dtype, cudaStream_t stream) {
  const int64_t pairs = r.size[0] * r.size[1] * r.size[2] * (r.size[3] / 2);
  if (pairs == 0) return cudaSuccess;
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t wanted = (pairs + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < int64_t{sms} * 16 ? wanted : int64_t{sms} * 16);
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    rotary_kernel<T><<<blocks, kThreads, 0, stream>>>(r);
    return cudaGetLastError();
  });
}

int64_t column_sum_workspace_floats(int64_t rows, int64_t cols) { return row_tiles(rows) * cols; }

cudaError_t launch_swiglu_forward(Matrix gate_up, Dtype dtype, void* out, cudaStream_t stream) {
  if (gate_up.rows == 0 || gate_up.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    swiglu_forward_kernel<T><<<elementwise_grid(gate_up.rows, gate_up.cols / 2), kThreads, 0, stream>>>(
        gate_up, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t launch_swiglu_backward(Matrix gate_up, const void* d_out, Dtype dtype, void* d_gate_up,
                                   cudaStream_t stream) {
  if (gate_up.rows == 0 || gate_up.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    swiglu_backward_kernel<T><<<elementwise_grid(gate_up.rows, gate_up.cols / 2), kThreads, 0, stream>>>(
        gate_up, static_cast<const T*>(d_out), static_cast<T*>(d_gate_up));
    return cudaGetLastError();
  });
}

cudaError_t launch_column_sum(Matrix g, Dtype dtype, float* workspace, void* bias_grad, cudaStream_t stream) {
  if (g.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    return column_sums<T>(g.rows, g.cols, ReadElement<T>{static_cast<const T*>(g.data), g.ld}, workspace, bias_grad,
                          stream);
  });
}

cudaError_t launch_gelu_tanh_backward_bias(const void* dy, const void* h, int64_t rows, int64_t cols, Dtype dtype,
                                           void* dh, float* workspace, void* bias_grad, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const GeluTanhBackward<T> op{static_cast<const T*>(dy), static_cast<const T*>(h), static_cast<T*>(dh), cols};
    return column_sums<T>(rows, cols, op, workspace, bias_grad, stream);
  });
}

}  // namespace stratum::nn::cuda
