// SwiGLU, RoPE, LayerNorm's backward, bias gradients and the tanh-GELU
// backward as one kernel each (two for column sums); see
// fused_elementwise_cuda.h.
//
// Every kernel moves 16 bytes per access (8 bf16/fp16 or 4 fp32 values) when
// the pointers are 16-byte aligned and the row lengths a multiple of that
// pack; otherwise the same kernel runs one element at a time. They are
// memory-bound: the first version's 2-byte accesses ran at a third of the
// bandwidth ATen's vectorized kernels reach (profiled on an H200).
//
// Column sums are deterministic: each block sums a tile of rows into its own
// row of the workspace, and a second kernel adds those rows in a fixed order
// (no atomics), as ATen's sum does.
#include "stratum/nn/fused_elementwise_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

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

constexpr int kThreads = 256;      // elementwise and row kernels
constexpr int kWarps = kThreads / 32;
constexpr int kColThreads = 32;    // column sums: threadIdx.x, one pack of columns each
constexpr int kRowLanes = 8;       // column sums: threadIdx.y
constexpr int kRowsPerBlock = 256; // column sums: rows one block sums
constexpr int kRotaryThreads = 128;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

#define STRATUM_GRID_STRIDE(i, total)                                                           \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (total); \
       i += int64_t{gridDim.x} * blockDim.x)

// ---- SwiGLU ----------------------------------------------------------------

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(Matrix gu, T* out, float* amax) {
  const int64_t f = gu.cols / 2, per_row = f / N;
  const T* in = static_cast<const T*>(gu.data);
  int m = 0;
  STRATUM_GRID_STRIDE(i, gu.rows * per_row) {
    const int64_t r = i / per_row, c = (i - r * per_row) * N;
    const Elems<T, N> g = load<T, N>(in + r * gu.ld + c), u = load<T, N>(in + r * gu.ld + f + c);
    Elems<T, N> y;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float x = widen<T>(g.v[k]);
      y.v[k] = narrow_to<T>(x * sigmoid(x) * widen<T>(u.v[k]));
      m = max(m, __float_as_int(fabsf(widen<T>(y.v[k]))));  // of the stored (rounded) value
    }
    store<T, N>(out + r * f + c, y);
  }
  if (amax != nullptr) {  // the same for the whole grid
    m = cuda_detail::block_max(m);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), m);
  }
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(Matrix gu, const T* d_out, T* d_gu, T* out) {
  const int64_t f = gu.cols / 2, per_row = f / N;
  const T* in = static_cast<const T*>(gu.data);
  STRATUM_GRID_STRIDE(i, gu.rows * per_row) {
    const int64_t r = i / per_row, c = (i - r * per_row) * N;
    const Elems<T, N> g = load<T, N>(in + r * gu.ld + c), u = load<T, N>(in + r * gu.ld + f + c);
    const Elems<T, N> d = load<T, N>(d_out + r * f + c);
    Elems<T, N> dg, du, y;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float x = widen<T>(g.v[k]), up = widen<T>(u.v[k]), dy = widen<T>(d.v[k]), s = sigmoid(x);
      dg.v[k] = narrow_to<T>(dy * up * s * (1.f + x * (1.f - s)));
      du.v[k] = narrow_to<T>(dy * x * s);
      y.v[k] = narrow_to<T>(x * s * up);  // the forward's value, as swiglu_forward_kernel rounds it
    }
    store<T, N>(d_gu + r * 2 * f + c, dg);
    store<T, N>(d_gu + r * 2 * f + f + c, du);
    if (out) store<T, N>(out + r * f + c, y);
  }
}

// ---- RoPE ------------------------------------------------------------------

// One thread per (row, pack of N pairs): reads x[d..] and x[d + D/2..],
// writes both. blockIdx.z is the batch, blockIdx.y the slower of (head,
// position) in x's memory and the threads walk the faster one, so a warp
// reads consecutive rows; no 64-bit divisions (they cost as much as the
// memory traffic at this size).
template <typename T, int N>
__global__ void __launch_bounds__(kRotaryThreads) rotary_kernel(Rotary a) {
  const bool heads_inner = a.x_stride[1] <= a.x_stride[2];
  const int n_inner = static_cast<int>(heads_inner ? a.size[1] : a.size[2]);
  const int64_t n_outer = heads_inner ? a.size[2] : a.size[1], half = a.size[3] / 2;
  const int per_row = static_cast<int>(half / N);
  const T* x = static_cast<const T*>(a.x);
  const T* cos = static_cast<const T*>(a.cos);
  const T* sin = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n_inner * per_row) return;
  const int inner = j / per_row, d = (j - inner * per_row) * N;
  for (int64_t b = blockIdx.z; b < a.size[0]; b += gridDim.z)
    for (int64_t outer = blockIdx.y; outer < n_outer; outer += gridDim.y) {
      const int64_t h = heads_inner ? inner : outer, t = heads_inner ? outer : inner;
      const int64_t xi = b * a.x_stride[0] + h * a.x_stride[1] + t * a.x_stride[2] + d;
      const int64_t yi = b * a.y_stride[0] + h * a.y_stride[1] + t * a.y_stride[2] + d;
      const int64_t ti = b * a.cos_batch_stride + t * a.size[3] + d;
      const Elems<T, N> lo = load<T, N>(x + xi), hi = load<T, N>(x + xi + half);
      const Elems<T, N> c_lo = load<T, N>(cos + ti), c_hi = load<T, N>(cos + ti + half);
      const Elems<T, N> s_lo = load<T, N>(sin + ti), s_hi = load<T, N>(sin + ti + half);
      Elems<T, N> y_lo, y_hi;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float l = widen<T>(lo.v[k]), u = widen<T>(hi.v[k]);
        if (!a.transpose) {
          y_lo.v[k] = narrow_to<T>(l * widen<T>(c_lo.v[k]) - u * widen<T>(s_lo.v[k]));
          y_hi.v[k] = narrow_to<T>(u * widen<T>(c_hi.v[k]) + l * widen<T>(s_hi.v[k]));
        } else {
          y_lo.v[k] = narrow_to<T>(l * widen<T>(c_lo.v[k]) + u * widen<T>(s_hi.v[k]));
          y_hi.v[k] = narrow_to<T>(u * widen<T>(c_hi.v[k]) - l * widen<T>(s_lo.v[k]));
        }
      }
      store<T, N>(y + yi, y_lo);
      store<T, N>(y + yi + half, y_hi);
    }
}

// ---- Column sums -----------------------------------------------------------

// An operation whose values are summed over rows: adds its kSums values for
// columns [c, c + N) of row r into acc.
template <typename T, int N>
struct ReadElement {  // the matrix itself
  static constexpr int kSums = 1;
  const T* data;
  int64_t ld;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[1][N]) const {
    const Elems<T, N> e = load<T, N>(data + r * ld + c);
#pragma unroll
    for (int k = 0; k < N; ++k) acc[0][k] += widen<T>(e.v[k]);
  }
};

// ---- tanh-GELU ---------------------------------------------------------------

constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

// tanh(sqrt(2 / pi) (v + 0.044715 v^3)), ATen's formula in fp32.
__device__ __forceinline__ float gelu_tanh_inner(float v) {
  const float v_sq = v * v;
  return tanhf(kGeluBeta * (v + kGeluKappa * v_sq * v));
}

// out = gelu_tanh(x) over n elements (N a pass of a thread); with `amax`,
// also max |out| over the stored values (see launch_gelu_tanh_forward).
template <typename T, int N>
__global__ void __launch_bounds__(kThreads) gelu_tanh_forward_kernel(const T* x, T* out, int64_t n, float* amax) {
  int m = 0;
  STRATUM_GRID_STRIDE(i, n / N) {
    const Elems<T, N> e = load<T, N>(x + i * N);
    Elems<T, N> y;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float v = widen<T>(e.v[k]);
      y.v[k] = narrow_to<T>(0.5f * v * (1.f + gelu_tanh_inner(v)));
      m = max(m, __float_as_int(fabsf(widen<T>(y.v[k]))));
    }
    store<T, N>(out + i * N, y);
  }
  if (amax != nullptr) {  // the same for the whole grid
    m = cuda_detail::block_max(m);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), m);
  }
}

// dh = dy * gelu_tanh'(h), ATen's formula in fp32: stores dh and sums it as
// stored; with `act`, also stores gelu_tanh(h) (ATen's forward formula). dh
// may be dy itself: each element is read before it is written.
template <typename T, int N>
struct GeluTanhBackward {
  static constexpr int kSums = 1;
  const T *dy, *h;
  T *dh, *act;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[1][N]) const {
    const int64_t i = r * cols + c;
    const Elems<T, N> x = load<T, N>(h + i), d = load<T, N>(dy + i);
    Elems<T, N> out, y;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float v = widen<T>(x.v[k]), v_sq = v * v;
      const float t = gelu_tanh_inner(v);
      const float derivative =
          0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kGeluBeta * (1.f + 3.f * kGeluKappa * v_sq);
      out.v[k] = narrow_to<T>(widen<T>(d.v[k]) * derivative);
      y.v[k] = narrow_to<T>(0.5f * v * (1.f + t));
      acc[0][k] += widen<T>(out.v[k]);
    }
    store<T, N>(dh + i, out);
    if (act) store<T, N>(act + i, y);
  }
};

// LayerNorm's parameter gradients: sums of dy * xhat (gamma) and of dy (beta).
template <typename T, int N>
struct LayerNormParams {
  static constexpr int kSums = 2;
  const T *dy, *h;
  const float *mean, *rstd;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[2][N]) const {
    const int64_t i = r * cols + c;
    const Elems<T, N> x = load<T, N>(h + i), d = load<T, N>(dy + i);
    const float m = mean[r], s = rstd[r];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float g = widen<T>(d.v[k]);
      acc[0][k] += g * (widen<T>(x.v[k]) - m) * s;
      acc[1][k] += g;
    }
  }
};

// Block (x, y) sums rows [y * kRowsPerBlock, ...) of columns
// [(x * kColThreads + threadIdx.x) * N, ... + N) into
// workspace[(s * tiles + y) * cols + c] for each sum s.
template <int N, typename Op>
__global__ void __launch_bounds__(kColThreads * kRowLanes)
    column_partial_sums(int64_t rows, int64_t cols, Op op, float* workspace) {
  constexpr int S = Op::kSums;
  const int64_t c = (blockIdx.x * int64_t{kColThreads} + threadIdx.x) * N;
  const int64_t r0 = blockIdx.y * int64_t{kRowsPerBlock};
  const int64_t r1 = r0 + kRowsPerBlock < rows ? r0 + kRowsPerBlock : rows;
  float acc[S][N] = {};
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) op(r, c, acc);
  __shared__ float part[kRowLanes][S * N][kColThreads + 1];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int k = 0; k < N; ++k) part[threadIdx.y][s * N + k][threadIdx.x] = acc[s][k];
  __syncthreads();
  // Each row lane finishes some of the S * N values of its column pack, in a fixed order.
  if (c < cols)
    for (int j = threadIdx.y; j < S * N; j += kRowLanes) {
      float sum = 0.f;
#pragma unroll
      for (int lane = 0; lane < kRowLanes; ++lane) sum += part[lane][j][threadIdx.x];
      const int s = j / N, k = j % N;
      workspace[(s * int64_t{gridDim.y} + blockIdx.y) * cols + c + k] = sum;
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    finish_column_sums(int sums, int64_t tiles, int64_t cols, const float* workspace, T* out0, T* out1) {
  STRATUM_GRID_STRIDE(i, sums * cols) {
    const int64_t s = i / cols, c = i - s * cols;
    const float* w = workspace + s * tiles * cols + c;
    float total = 0.f;
    for (int64_t t = 0; t < tiles; ++t) total += w[t * cols];
    (s == 0 ? out0 : out1)[c] = narrow_to<T>(total);
  }
}

// ---- LayerNorm's input gradient ---------------------------------------------

// One warp per row; the row is read twice (the second time from cache).
template <typename T, int N>
__global__ void __launch_bounds__(kThreads) layer_norm_backward_input_kernel(LayerNormBackward a) {
  const T* h = static_cast<const T*>(a.h);
  const T* dy = static_cast<const T*>(a.dy);
  const T* dh_ext = static_cast<const T*>(a.dh_ext);
  const T* gamma = static_cast<const T*>(a.gamma);
  T* dh = static_cast<T*>(a.dh);
  const int lane = threadIdx.x % 32;
  const float inv_cols = 1.f / static_cast<float>(a.cols);
  for (int64_t r = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; r < a.rows; r += int64_t{gridDim.x} * kWarps) {
    const float mean = a.mean[r], rstd = a.rstd[r];
    const int64_t base = r * a.cols;
    float sum_g = 0.f, sum_gx = 0.f;
    for (int64_t c = lane * N; c < a.cols; c += 32 * N) {
      const Elems<T, N> d = load<T, N>(dy + base + c), x = load<T, N>(h + base + c), w = load<T, N>(gamma + c);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float g = widen<T>(d.v[k]) * widen<T>(w.v[k]);
        sum_g += g;
        sum_gx += g * (widen<T>(x.v[k]) - mean) * rstd;
      }
    }
    const float mean_g = warp_sum(sum_g) * inv_cols, mean_gx = warp_sum(sum_gx) * inv_cols;
    for (int64_t c = lane * N; c < a.cols; c += 32 * N) {
      const Elems<T, N> d = load<T, N>(dy + base + c), x = load<T, N>(h + base + c), w = load<T, N>(gamma + c);
      Elems<T, N> ext;
      if (dh_ext) ext = load<T, N>(dh_ext + base + c);
      Elems<T, N> out;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float g = widen<T>(d.v[k]) * widen<T>(w.v[k]);
        const float xhat = (widen<T>(x.v[k]) - mean) * rstd;
        float v = rstd * (g - mean_g - xhat * mean_gx);
        if (dh_ext) v += widen<T>(ext.v[k]);
        out.v[k] = narrow_to<T>(v);
      }
      store<T, N>(dh + base + c, out);
    }
  }
}

// ---- Launch helpers ----------------------------------------------------------

// Whether every pointer is 16-byte aligned and every length a multiple of T's pack.
template <typename T>
bool packable(std::initializer_list<const void*> ptrs, std::initializer_list<int64_t> lengths) {
  for (const void* p : ptrs)
    if (p != nullptr && !aligned_to(p, 16)) return false;
  for (int64_t n : lengths)
    if (n % kPack<T> != 0) return false;
  return true;
}

// Blocks of kThreads for a grid-stride loop over `work` items: enough to fill the GPU.
unsigned grid_for(int64_t work, int64_t items_per_block = kThreads) { return capped_grid(work, items_per_block, 32); }

int64_t row_tiles(int64_t rows) { return (rows + kRowsPerBlock - 1) / kRowsPerBlock; }

template <typename T, int N, typename Op>
cudaError_t column_sums(int64_t rows, int64_t cols, Op op, float* workspace, void* out0, void* out1,
                        cudaStream_t stream) {
  const int64_t tiles = row_tiles(rows), col_blocks = (cols / N + kColThreads - 1) / kColThreads;
  if (tiles > 0)
    column_partial_sums<N><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(tiles)),
                             dim3(kColThreads, kRowLanes), 0, stream>>>(rows, cols, op, workspace);
  finish_column_sums<T><<<grid_for(Op::kSums * cols), kThreads, 0, stream>>>(
      Op::kSums, tiles, cols, workspace, static_cast<T*>(out0), static_cast<T*>(out1));
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

int64_t column_sum_workspace_floats(int64_t rows, int64_t cols) { return 2 * row_tiles(rows) * cols; }

cudaError_t launch_swiglu_forward(Matrix gate_up, Dtype dtype, void* out, cudaStream_t stream, float* amax) {
  if (gate_up.rows == 0 || gate_up.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const int64_t f = gate_up.cols / 2;
    if (packable<T>({gate_up.data, out}, {f, gate_up.ld})) {
      constexpr int N = kPack<T>;
      swiglu_forward_kernel<T, N><<<grid_for(gate_up.rows * f / N), kThreads, 0, stream>>>(
          gate_up, static_cast<T*>(out), amax);
    } else {
      swiglu_forward_kernel<T, 1><<<grid_for(gate_up.rows * f), kThreads, 0, stream>>>(gate_up, static_cast<T*>(out),
                                                                                      amax);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_swiglu_backward(Matrix gate_up, const void* d_out, Dtype dtype, void* d_gate_up, void* out,
                                   cudaStream_t stream) {
  if (gate_up.rows == 0 || gate_up.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const int64_t f = gate_up.cols / 2;
    const T* d = static_cast<const T*>(d_out);
    T *dgu = static_cast<T*>(d_gate_up), *y = static_cast<T*>(out);
    if (packable<T>({gate_up.data, d_out, d_gate_up, out}, {f, gate_up.ld})) {
      constexpr int N = kPack<T>;
      swiglu_backward_kernel<T, N><<<grid_for(gate_up.rows * f / N), kThreads, 0, stream>>>(gate_up, d, dgu, y);
    } else {
      swiglu_backward_kernel<T, 1><<<grid_for(gate_up.rows * f), kThreads, 0, stream>>>(gate_up, d, dgu, y);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_rotary(const Rotary& r, Dtype dtype, cudaStream_t stream) {
  const int64_t half = r.size[3] / 2;
  const bool heads_inner = r.x_stride[1] <= r.x_stride[2];
  const int64_t n_inner = heads_inner ? r.size[1] : r.size[2], n_outer = heads_inner ? r.size[2] : r.size[1];
  if (r.size[0] * n_inner * n_outer * half == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const bool packed = packable<T>({r.x, r.cos, r.sin, r.y}, {half, r.x_stride[0], r.x_stride[1], r.x_stride[2],
                                                               r.y_stride[0], r.y_stride[1], r.y_stride[2]});
    const int64_t inner_work = n_inner * (packed ? half / kPack<T> : half);
    if (inner_work > int64_t{1} << 30) return cudaErrorInvalidValue;  // int indices in the kernel
    // Few heads (GQA's k) take a smaller block rather than idle threads.
    const int64_t threads = std::min<int64_t>(kRotaryThreads, (inner_work + 31) / 32 * 32);
    const dim3 grid(static_cast<unsigned>((inner_work + threads - 1) / threads),
                    static_cast<unsigned>(std::min<int64_t>(n_outer, 65535)),
                    static_cast<unsigned>(std::min<int64_t>(r.size[0], 65535)));
    if (packed) rotary_kernel<T, kPack<T>><<<grid, static_cast<unsigned>(threads), 0, stream>>>(r);
    else rotary_kernel<T, 1><<<grid, static_cast<unsigned>(threads), 0, stream>>>(r);
    return cudaGetLastError();
  });
}

cudaError_t launch_column_sum(Matrix g, Dtype dtype, float* workspace, void* bias_grad, cudaStream_t stream) {
  if (g.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* data = static_cast<const T*>(g.data);
    if (packable<T>({g.data}, {g.cols, g.ld}))
      return column_sums<T, kPack<T>>(g.rows, g.cols, ReadElement<T, kPack<T>>{data, g.ld}, workspace, bias_grad,
                                      nullptr, stream);
    return column_sums<T, 1>(g.rows, g.cols, ReadElement<T, 1>{data, g.ld}, workspace, bias_grad, nullptr, stream);
  });
}

cudaError_t launch_gelu_tanh_backward_bias(const void* dy, const void* h, int64_t rows, int64_t cols, Dtype dtype,
                                           void* dh, void* gelu_h, float* workspace, void* bias_grad,
                                           cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T *d = static_cast<const T*>(dy), *x = static_cast<const T*>(h);
    T *out = static_cast<T*>(dh), *act = static_cast<T*>(gelu_h);
    if (packable<T>({dy, h, dh, gelu_h}, {cols}))
      return column_sums<T, kPack<T>>(rows, cols, GeluTanhBackward<T, kPack<T>>{d, x, out, act, cols}, workspace,
                                      bias_grad, nullptr, stream);
    return column_sums<T, 1>(rows, cols, GeluTanhBackward<T, 1>{d, x, out, act, cols}, workspace, bias_grad, nullptr,
                             stream);
  });
}

cudaError_t launch_gelu_tanh_forward(const void* h, int64_t n, Dtype dtype, void* out, cudaStream_t stream,
                                     float* amax) {
  if (n == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(h);
    T* y = static_cast<T*>(out);
    if (packable<T>({h, out}, {n})) {
      constexpr int N = kPack<T>;
      gelu_tanh_forward_kernel<T, N><<<grid_for(n / N), kThreads, 0, stream>>>(x, y, n, amax);
    } else {
      gelu_tanh_forward_kernel<T, 1><<<grid_for(n), kThreads, 0, stream>>>(x, y, n, amax);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_layer_norm_backward_input(const LayerNormBackward& a, Dtype dtype, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const unsigned blocks = grid_for(a.rows, kWarps);
    if (packable<T>({a.h, a.dy, a.dh_ext, a.gamma, a.dh}, {a.cols}))
      layer_norm_backward_input_kernel<T, kPack<T>><<<blocks, kThreads, 0, stream>>>(a);
    else
      layer_norm_backward_input_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t launch_layer_norm_backward_params(const LayerNormBackward& a, Dtype dtype, float* workspace,
                                              void* gamma_grad, void* beta_grad, cudaStream_t stream) {
  if (a.cols == 0) return cudaSuccess;
  return by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T *dy = static_cast<const T*>(a.dy), *h = static_cast<const T*>(a.h);
    if (packable<T>({a.dy, a.h}, {a.cols}))
      return column_sums<T, kPack<T>>(a.rows, a.cols, LayerNormParams<T, kPack<T>>{dy, h, a.mean, a.rstd, a.cols},
                                      workspace, gamma_grad, beta_grad, stream);
    return column_sums<T, 1>(a.rows, a.cols, LayerNormParams<T, 1>{dy, h, a.mean, a.rstd, a.cols}, workspace,
                             gamma_grad, beta_grad, stream);
  });
}

}  // namespace stratum::nn::cuda
