// See cast_cuda.h. One thread an element (eight for 16-bit inputs whose
// sizes are multiples of 8, every projection's); FP8 through cuda_fp8.h's
// saturating conversion (round to nearest even, NaN kept), which is what the
// reference's clamp-then-cast computes.
#include "stratum/nn/float8/cast_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "stratum/core/cuda_float_convert.cuh"
#include "stratum/core/cuda_kernel_util.cuh"

namespace stratum::nn::float8::cuda {
namespace {

using stratum::cuda_detail::block_max;
using stratum::cuda_detail::widen;

constexpr int kTile = 32;      // transpose tiles: kTile x kTile elements
constexpr int kTileRows = 8;   // threads a tile column: kTile x kTileRows threads a block
constexpr int kThreads = 256;  // amax and rowwise blocks
constexpr float kAmaxFloor = 1e-12f;

// |x| as an int: non-negative floats (Inf, NaN with a clear sign) order as their bits.
__device__ __forceinline__ int abs_bits(float x) { return __float_as_int(fabsf(x)); }

__device__ __forceinline__ float scale_of(float amax, float max_value, bool power_of_2) {
  const float guarded = amax != amax ? amax : fmaxf(amax, kAmaxFloor);  // NaN stays NaN
  float s = __fdiv_rn(max_value, guarded);
  if (power_of_2 && s == s) s = __int_as_float(__float_as_int(s) & 0x7f800000);
  return s;
}

__device__ __forceinline__ uint8_t to_fp8(float v, Fp8 fmt) {
  return fmt == Fp8::e4m3 ? __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)
                          : __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
}

__host__ __device__ __forceinline__ float max_of(Fp8 fmt) { return fmt == Fp8::e4m3 ? 448.0f : 57344.0f; }

template <typename T>
__global__ void __launch_bounds__(kThreads) amax_kernel(const T* src, int64_t n, float* amax) {
  int m = 0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads)
    m = max(m, abs_bits(widen<T>(src[i])));
  m = block_max(m);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), m);
}

// Tiles of kTile x kTile: each value cast once, written in place and kept in
// shared memory for the transposed write (coalesced on both sides).
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    cast_tensorwise_kernel(const T* src, int64_t rows, int64_t cols, const float* amax, Fp8 fmt, bool power_of_2,
                           float* scale_inv, uint8_t* out, uint8_t* out_t) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float s = scale_of(*amax, max_of(fmt), power_of_2);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = __frcp_rn(s);
  const int64_t c0 = int64_t{blockIdx.x} * kTile;
  for (int64_t r0 = int64_t{blockIdx.y} * kTile; r0 < rows; r0 += int64_t{gridDim.y} * kTile) {
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) {
        const uint8_t q = to_fp8(widen<T>(src[r * cols + c]) * s, fmt);
        out[r * cols + c] = q;
        tile[i][threadIdx.x] = q;
      }
    }
    if (out_t == nullptr) continue;  // the same for the whole block
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (c < cols && r < rows) out_t[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

// 16-bit inputs whose sizes are multiples of 8 (every projection's
// activations and gradients) go through 16-byte loads and 8-byte stores: the
// one-element kernels above move 2 and 1 bytes a thread, well short of the
// memory's bandwidth. Same values, bit for bit: the same conversion each.
constexpr int kVec = 8;                      // 16-bit elements a 16-byte load
constexpr int kVecTile = 64;                 // tiles of kVecTile x kVecTile elements
constexpr int kVecLanes = kVecTile / kVec;   // threads across a tile's row
constexpr int kVecRows = kThreads / kVecLanes;  // rows a pass of the block

__device__ __forceinline__ uint2 pack8(const uint8_t (&q)[kVec]) {
  return make_uint2(q[0] | (q[1] << 8) | (q[2] << 16) | (uint32_t{q[3]} << 24),
                    q[4] | (q[5] << 8) | (q[6] << 16) | (uint32_t{q[7]} << 24));
}

using VecTile = uint8_t[kVecTile][kVecTile + kVec];  // row stride 72: 8-byte runs stay aligned

// The tile (rows r0.., columns c0.. of a rows x cols matrix, in FP8) written
// transposed into out_t: column i of the tile is row c0 + i of out_t,
// kVecLanes threads writing its kVecTile bytes, 8 each.
__device__ __forceinline__ void write_tile_transposed(const VecTile& tile, int64_t r0, int64_t c0, int64_t rows,
                                                      int64_t cols, uint8_t* out_t) {
  const int lane = threadIdx.x % kVecLanes, row_in_pass = threadIdx.x / kVecLanes;
  for (int i = row_in_pass; i < kVecTile; i += kVecRows) {
    const int64_t cc = c0 + i, r = r0 + int64_t{lane} * kVec;
    if (cc < cols && r < rows) {
      uint8_t q[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) q[j] = tile[lane * kVec + j][i];
      *reinterpret_cast<uint2*>(out_t + cc * rows + r) = pack8(q);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) amax_vec_kernel(const uint4* src, int64_t vectors, float* amax) {
  int m = 0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < vectors; i += int64_t{gridDim.x} * kThreads) {
    const uint4 raw = src[i];
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) m = max(m, abs_bits(widen<T>(v[j])));
  }
  m = block_max(m);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), m);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cast_tensorwise_vec_kernel(const T* src, int64_t rows, int64_t cols, const float* amax, Fp8 fmt, bool power_of_2,
                               float* scale_inv, uint8_t* out, uint8_t* out_t) {
  __shared__ __align__(16) VecTile tile;
  const float s = scale_of(*amax, max_of(fmt), power_of_2);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = __frcp_rn(s);
  const int lane = threadIdx.x % kVecLanes, row_in_pass = threadIdx.x / kVecLanes;
  const int64_t c0 = int64_t{blockIdx.x} * kVecTile;
  for (int64_t r0 = int64_t{blockIdx.y} * kVecTile; r0 < rows; r0 += int64_t{gridDim.y} * kVecTile) {
    for (int i = row_in_pass; i < kVecTile; i += kVecRows) {
      const int64_t r = r0 + i, c = c0 + int64_t{lane} * kVec;
      if (r < rows && c < cols) {  // rows and cols are multiples of 8: the whole run is inside
        const uint4 raw = *reinterpret_cast<const uint4*>(src + r * cols + c);
        const T* v = reinterpret_cast<const T*>(&raw);
        uint8_t q[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) q[j] = to_fp8(widen<T>(v[j]) * s, fmt);
        const uint2 packed = pack8(q);
        *reinterpret_cast<uint2*>(out + r * cols + c) = packed;
        if (out_t != nullptr) *reinterpret_cast<uint2*>(&tile[i][lane * kVec]) = packed;
      }
    }
    if (out_t == nullptr) continue;  // the same for the whole block
    __syncthreads();
    write_tile_transposed(tile, r0, c0, rows, cols, out_t);
    __syncthreads();
  }
}

bool aligned(const void* p, size_t bytes) { return p == nullptr || stratum::cuda_detail::aligned_to(p, bytes); }

// Thread 0: a row's amax (block_max's bits), its scale's inverse, and the
// scale for the block's cast (in shared memory).
__device__ __forceinline__ void publish_row_scale(int amax_bits, Fp8 fmt, bool power_of_2, float* amax,
                                                  float* scale_inv, float* row_scale) {
  if (threadIdx.x != 0) return;
  const float a = __int_as_float(amax_bits);
  const float s = scale_of(a, max_of(fmt), power_of_2);
  *amax = a;
  *scale_inv = __frcp_rn(s);
  *row_scale = s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) cast_rowwise_kernel(const T* src, int64_t rows, int64_t cols, Fp8 fmt,
                                                                bool power_of_2, uint8_t* out, float* scale_inv,
                                                                float* amax) {
  __shared__ float row_scale;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = src + r * cols;
    int m = 0;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = max(m, abs_bits(widen<T>(row[c])));
    publish_row_scale(block_max(m), fmt, power_of_2, amax + r, scale_inv + r, &row_scale);
    __syncthreads();
    const float s = row_scale;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[r * cols + c] = to_fp8(widen<T>(row[c]) * s, fmt);
    __syncthreads();  // row_scale and block_max's scratch are reused by the next row
  }
}

// cast_rowwise_kernel for 16-bit rows of a multiple of 8 values: 16-byte
// loads, 8-byte stores.
template <typename T>
__global__ void __launch_bounds__(kThreads) cast_rowwise_vec_kernel(const T* src, int64_t rows, int64_t cols, Fp8 fmt,
                                                                    bool power_of_2, uint8_t* out, float* scale_inv,
                                                                    float* amax) {
  __shared__ float row_scale;
  const int64_t vectors = cols / kVec;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint4* row = reinterpret_cast<const uint4*>(src + r * cols);
    int m = 0;
    for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
      const uint4 raw = row[v];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) m = max(m, abs_bits(widen<T>(e[j])));
    }
    publish_row_scale(block_max(m), fmt, power_of_2, amax + r, scale_inv + r, &row_scale);
    __syncthreads();
    const float s = row_scale;
    uint2* o = reinterpret_cast<uint2*>(out + r * cols);
    for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
      const uint4 raw = row[v];
      const T* e = reinterpret_cast<const T*>(&raw);
      uint8_t q[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) q[j] = to_fp8(widen<T>(e[j]) * s, fmt);
      o[v] = pack8(q);
    }
    __syncthreads();  // row_scale and block_max's scratch are reused by the next row
  }
}

// Pass 1 of the columnwise cast: a block a strip of kTile columns and a run of rows.
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    column_amax_kernel(const T* src, int64_t rows, int64_t cols, float* amax) {
  __shared__ int partial[kTileRows][kTile];
  const int64_t c = int64_t{blockIdx.x} * kTile + threadIdx.x;
  int m = 0;
  if (c < cols)
    for (int64_t r = int64_t{blockIdx.y} * kTileRows + threadIdx.y; r < rows; r += int64_t{gridDim.y} * kTileRows)
      m = max(m, abs_bits(widen<T>(src[r * cols + c])));
  partial[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int i = 1; i < kTileRows; ++i) m = max(m, partial[i][threadIdx.x]);
    atomicMax(reinterpret_cast<int*>(amax + c), m);
  }
}

// Pass 2: column c's values scaled by its scale, written as row c of out_t.
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    cast_columnwise_transposed_kernel(const T* src, int64_t rows, int64_t cols, Fp8 fmt, bool power_of_2,
                                      const float* amax, float* scale_inv, uint8_t* out_t) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int64_t c = int64_t{blockIdx.x} * kTile + threadIdx.x;
  const float s = c < cols ? scale_of(amax[c], max_of(fmt), power_of_2) : 0.0f;
  if (blockIdx.y == 0 && threadIdx.y == 0 && c < cols) scale_inv[c] = __frcp_rn(s);
  for (int64_t r0 = int64_t{blockIdx.y} * kTile; r0 < rows; r0 += int64_t{gridDim.y} * kTile) {
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i;
      if (r < rows && c < cols) tile[i][threadIdx.x] = to_fp8(widen<T>(src[r * cols + c]) * s, fmt);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t cc = int64_t{blockIdx.x} * kTile + i, r = r0 + threadIdx.x;
      if (cc < cols && r < rows) out_t[cc * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

// The columnwise transposed cast's two passes for 16-bit inputs whose sizes
// are multiples of 8: a thread reads 8 columns of a row at once (16 bytes).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    column_amax_vec_kernel(const T* src, int64_t rows, int64_t cols, float* amax) {
  __shared__ int partial[kVecRows][kVecTile];
  const int lane = threadIdx.x % kVecLanes, row_in_pass = threadIdx.x / kVecLanes;
  const int64_t c0 = int64_t{blockIdx.x} * kVecTile, c = c0 + int64_t{lane} * kVec;
  int m[kVec] = {};
  if (c < cols)
    for (int64_t r = int64_t{blockIdx.y} * kVecRows + row_in_pass; r < rows; r += int64_t{gridDim.y} * kVecRows) {
      const uint4 raw = *reinterpret_cast<const uint4*>(src + r * cols + c);
      const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) m[j] = max(m[j], abs_bits(widen<T>(v[j])));
    }
#pragma unroll
  for (int j = 0; j < kVec; ++j) partial[row_in_pass][lane * kVec + j] = m[j];
  __syncthreads();
  if (threadIdx.x < kVecTile && c0 + threadIdx.x < cols) {
    int v = partial[0][threadIdx.x];
    for (int i = 1; i < kVecRows; ++i) v = max(v, partial[i][threadIdx.x]);
    atomicMax(reinterpret_cast<int*>(amax + c0 + threadIdx.x), v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cast_columnwise_transposed_vec_kernel(const T* src, int64_t rows, int64_t cols, Fp8 fmt, bool power_of_2,
                                          const float* amax, float* scale_inv, uint8_t* out_t) {
  __shared__ __align__(16) VecTile tile;
  const int lane = threadIdx.x % kVecLanes, row_in_pass = threadIdx.x / kVecLanes;
  const int64_t c0 = int64_t{blockIdx.x} * kVecTile, c = c0 + int64_t{lane} * kVec;
  float s[kVec] = {};
  if (c < cols) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) s[j] = scale_of(amax[c + j], max_of(fmt), power_of_2);
    if (blockIdx.y == 0 && row_in_pass == 0)
#pragma unroll
      for (int j = 0; j < kVec; ++j) scale_inv[c + j] = __frcp_rn(s[j]);
  }
  for (int64_t r0 = int64_t{blockIdx.y} * kVecTile; r0 < rows; r0 += int64_t{gridDim.y} * kVecTile) {
    for (int i = row_in_pass; i < kVecTile; i += kVecRows) {
      const int64_t r = r0 + i;
      if (r < rows && c < cols) {
        const uint4 raw = *reinterpret_cast<const uint4*>(src + r * cols + c);
        const T* v = reinterpret_cast<const T*>(&raw);
        uint8_t q[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) q[j] = to_fp8(widen<T>(v[j]) * s[j], fmt);
        *reinterpret_cast<uint2*>(&tile[i][lane * kVec]) = pack8(q);
      }
    }
    __syncthreads();
    write_tile_transposed(tile, r0, c0, rows, cols, out_t);
    __syncthreads();
  }
}

constexpr int kBlock = 128;             // values a scale in blockwise casts
constexpr int kWarpsPerBlock = kThreads / 32;

// A warp a 1 x 128 block: 4 values a lane (lane, lane + 32, ...: coalesced),
// the amax by shuffles.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    cast_blocks_1x128_kernel(const T* src, int64_t rows, int64_t cols, int64_t col_blocks, Fp8 fmt, bool power_of_2,
                             uint8_t* out, float* scale_inv, float* amax) {
  const int lane = threadIdx.x % 32;
  const int64_t blocks = rows * col_blocks;
  for (int64_t b = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32; b < blocks;
       b += int64_t{gridDim.x} * kWarpsPerBlock) {
    const int64_t r = b / col_blocks, c0 = (b % col_blocks) * kBlock;
    float v[4];
    int m = 0;
    for (int e = 0; e < 4; ++e) {
      const int64_t c = c0 + e * 32 + lane;
      v[e] = c < cols ? widen<T>(src[r * cols + c]) : 0.0f;
      m = max(m, abs_bits(v[e]));
    }
    for (int o = 16; o > 0; o /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float a = __int_as_float(m);
    const float s = scale_of(a, max_of(fmt), power_of_2);
    for (int e = 0; e < 4; ++e) {
      const int64_t c = c0 + e * 32 + lane;
      if (c < cols) out[r * cols + c] = to_fp8(v[e] * s, fmt);
    }
    if (lane == 0) {
      amax[b] = a;
      scale_inv[b] = __frcp_rn(s);
    }
  }
}

// A block a tile of kBlock rows x kTile columns of src: column c's 128 rows
// are one block of row c of out_t.
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    cast_blocks_1x128_transposed_kernel(const T* src, int64_t rows, int64_t cols, int64_t row_blocks, Fp8 fmt,
                                        bool power_of_2, uint8_t* out_t, float* scale_inv_t, float* amax_t) {
  __shared__ int partial[kTileRows][kTile];
  __shared__ float column_scale[kTile];
  __shared__ uint8_t tile[kTile][kBlock + 4];
  const int64_t c = int64_t{blockIdx.x} * kTile + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * kBlock;
  int m = 0;
  if (c < cols)
    for (int i = threadIdx.y; i < kBlock && r0 + i < rows; i += kTileRows)
      m = max(m, abs_bits(widen<T>(src[(r0 + i) * cols + c])));
  partial[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int i = 1; i < kTileRows; ++i) m = max(m, partial[i][threadIdx.x]);
    const float a = __int_as_float(m);
    const float s = scale_of(a, max_of(fmt), power_of_2);
    column_scale[threadIdx.x] = s;
    if (c < cols) {
      amax_t[c * row_blocks + blockIdx.y] = a;
      scale_inv_t[c * row_blocks + blockIdx.y] = __frcp_rn(s);
    }
  }
  __syncthreads();
  const float s = column_scale[threadIdx.x];
  for (int i = threadIdx.y; i < kBlock; i += kTileRows)
    if (c < cols && r0 + i < rows) tile[threadIdx.x][i] = to_fp8(widen<T>(src[(r0 + i) * cols + c]) * s, fmt);
  __syncthreads();
  // Row cc of out_t from the tile: a warp writes 32 consecutive bytes at a time.
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t cc = int64_t{blockIdx.x} * kTile + i;
    if (cc >= cols) continue;
    for (int k = threadIdx.x; k < kBlock; k += kTile)
      if (r0 + k < rows) out_t[cc * rows + r0 + k] = tile[i][k];
  }
}

// Grid of tiles: columns across x, rows across y (capped; the kernels stride over the rest).
dim3 tile_grid(int64_t rows, int64_t cols) {
  const int64_t x = (cols + kTile - 1) / kTile, y = (rows + kTile - 1) / kTile;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y < 65535 ? y : 65535));
}

template <typename F>
cudaError_t dispatch(Dtype dtype, F&& launch) {
  if (dtype == Dtype::bf16) launch(static_cast<const __nv_bfloat16*>(nullptr));
  else if (dtype == Dtype::f16) launch(static_cast<const __half*>(nullptr));
  else launch(static_cast<const float*>(nullptr));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_amax(const void* src, Dtype dtype, int64_t n, float* amax, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (dtype != Dtype::f32 && n % kVec == 0 && aligned(src, 16)) {
    const unsigned blocks = stratum::cuda_detail::capped_grid(n / kVec, kThreads * 2, 8);
    const auto* v = static_cast<const uint4*>(src);
    if (dtype == Dtype::bf16) amax_vec_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(v, n / kVec, amax);
    else amax_vec_kernel<__half><<<blocks, kThreads, 0, stream>>>(v, n / kVec, amax);
    return cudaGetLastError();
  }
  const unsigned blocks = stratum::cuda_detail::capped_grid(n, kThreads * 4, 4);
  return dispatch(dtype, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    amax_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(src), n, amax);
  });
}

cudaError_t launch_cast_tensorwise(const void* src, Dtype dtype, int64_t rows, int64_t cols, const float* amax,
                                   Fp8 fmt, bool power_of_2, float* scale_inv, void* out, void* out_t,
                                   cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if ((cols + kTile - 1) / kTile > 0x7fffffff) return cudaErrorInvalidValue;
  if (dtype != Dtype::f32 && rows % kVec == 0 && cols % kVec == 0 && aligned(src, 16) && aligned(out, 8) &&
      aligned(out_t, 8)) {
    const int64_t x = (cols + kVecTile - 1) / kVecTile, y = (rows + kVecTile - 1) / kVecTile;
    const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(y < 65535 ? y : 65535));
    auto* o = static_cast<uint8_t*>(out);
    auto* ot = static_cast<uint8_t*>(out_t);
    if (dtype == Dtype::bf16)
      cast_tensorwise_vec_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(src), rows, cols, amax, fmt, power_of_2, scale_inv, o, ot);
    else
      cast_tensorwise_vec_kernel<__half><<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(src), rows, cols,
                                                                        amax, fmt, power_of_2, scale_inv, o, ot);
    return cudaGetLastError();
  }
  return dispatch(dtype, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    cast_tensorwise_kernel<T><<<tile_grid(rows, cols), dim3(kTile, kTileRows), 0, stream>>>(
        static_cast<const T*>(src), rows, cols, amax, fmt, power_of_2, scale_inv, static_cast<uint8_t*>(out),
        static_cast<uint8_t*>(out_t));
  });
}

cudaError_t launch_cast_rowwise(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt, bool power_of_2,
                                void* out, float* scale_inv, float* amax, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(rows < 65535 * 16 ? rows : 65535 * 16);
  if (dtype != Dtype::f32 && cols % kVec == 0 && aligned(src, 16) && aligned(out, 8)) {
    auto* o = static_cast<uint8_t*>(out);
    if (dtype == Dtype::bf16)
      cast_rowwise_vec_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(src), rows, cols, fmt, power_of_2, o, scale_inv, amax);
    else
      cast_rowwise_vec_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(src), rows, cols, fmt,
                                                                       power_of_2, o, scale_inv, amax);
    return cudaGetLastError();
  }
  return dispatch(dtype, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    cast_rowwise_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(src), rows, cols, fmt, power_of_2,
                                                           static_cast<uint8_t*>(out), scale_inv, amax);
  });
}

cudaError_t launch_cast_columnwise_transposed(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt,
                                              bool power_of_2, void* out_t, float* scale_inv, float* amax,
                                              cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (dtype != Dtype::f32 && rows % kVec == 0 && cols % kVec == 0 && aligned(src, 16) && aligned(out_t, 8)) {
    const int64_t strips = (cols + kVecTile - 1) / kVecTile, runs = (rows + kVecRows - 1) / kVecRows;
    const int64_t want = (int64_t{stratum::cuda_detail::sm_count()} * 4 + strips - 1) / strips;
    const int64_t y = std::min<int64_t>({want, runs, 65535});
    const int64_t tiles = std::min<int64_t>((rows + kVecTile - 1) / kVecTile, 65535);
    const dim3 amax_grid(static_cast<unsigned>(strips), static_cast<unsigned>(y));
    const dim3 cast_grid(static_cast<unsigned>(strips), static_cast<unsigned>(tiles));
    auto* o = static_cast<uint8_t*>(out_t);
    if (dtype == Dtype::bf16) {
      const auto* x = static_cast<const __nv_bfloat16*>(src);
      column_amax_vec_kernel<__nv_bfloat16><<<amax_grid, kThreads, 0, stream>>>(x, rows, cols, amax);
      cast_columnwise_transposed_vec_kernel<__nv_bfloat16><<<cast_grid, kThreads, 0, stream>>>(
          x, rows, cols, fmt, power_of_2, amax, scale_inv, o);
    } else {
      const auto* x = static_cast<const __half*>(src);
      column_amax_vec_kernel<__half><<<amax_grid, kThreads, 0, stream>>>(x, rows, cols, amax);
      cast_columnwise_transposed_vec_kernel<__half><<<cast_grid, kThreads, 0, stream>>>(x, rows, cols, fmt,
                                                                                        power_of_2, amax, scale_inv, o);
    }
    return cudaGetLastError();
  }
  const int64_t strips = (cols + kTile - 1) / kTile;
  // Enough row runs to fill the GPU: about 4 blocks an SM in all.
  const int64_t want = (int64_t{stratum::cuda_detail::sm_count()} * 4 + strips - 1) / strips;
  const int64_t runs = (rows + kTileRows - 1) / kTileRows;
  const dim3 amax_grid(static_cast<unsigned>(strips), static_cast<unsigned>(want < runs ? (want < 65535 ? want : 65535)
                                                                                         : (runs < 65535 ? runs : 65535)));
  return dispatch(dtype, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    column_amax_kernel<T><<<amax_grid, dim3(kTile, kTileRows), 0, stream>>>(static_cast<const T*>(src), rows, cols,
                                                                           amax);
    cast_columnwise_transposed_kernel<T><<<tile_grid(rows, cols), dim3(kTile, kTileRows), 0, stream>>>(
        static_cast<const T*>(src), rows, cols, fmt, power_of_2, amax, scale_inv, static_cast<uint8_t*>(out_t));
  });
}

cudaError_t launch_cast_blocks_1x128(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt,
                                     bool power_of_2, void* out, float* scale_inv, float* amax, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t col_blocks = (cols + kBlock - 1) / kBlock;
  const unsigned grid = stratum::cuda_detail::capped_grid(rows * col_blocks, kWarpsPerBlock, 8);
  return dispatch(dtype, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    cast_blocks_1x128_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(src), rows, cols, col_blocks,
                                                                fmt, power_of_2, static_cast<uint8_t*>(out),
                                                                scale_inv, amax);
  });
}

cudaError_t launch_cast_blocks_1x128_transposed(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt,
                                                bool power_of_2, void* out_t, float* scale_inv_t, float* amax_t,
                                                cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock, strips = (cols + kTile - 1) / kTile;
  if (strips > 0x7fffffff || row_blocks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(strips), static_cast<unsigned>(row_blocks));
  return dispatch(dtype, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    cast_blocks_1x128_transposed_kernel<T><<<grid, dim3(kTile, kTileRows), 0, stream>>>(
        static_cast<const T*>(src), rows, cols, row_blocks, fmt, power_of_2, static_cast<uint8_t*>(out_t),
        scale_inv_t, amax_t);
  });
}

}  // namespace stratum::nn::float8::cuda
