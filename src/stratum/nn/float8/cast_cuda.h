#pragma once
// The FP8 cast kernels behind nn/float8/cast.h (cast_cuda.cu): amax, scale,
// saturating cast and the transposed copy, reading the input once where the
// scale allows. Plain pointers, no torch headers, so nvcc compiles only this.
// Scales follow nn/float8/scaling.h bit for bit: scale = max / max(amax,
// 1e-12) rounded once (powers of two: rounded down), scale_inv = 1 / scale.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::nn::float8::cuda {

using stratum::cuda::Dtype;

enum class Fp8 { e4m3, e5m2 };

// *amax = max |src[i]| over n values (NaN wins). *amax must hold 0 (or a
// lower bound) before: blocks combine by atomic max.
cudaError_t launch_amax(const void* src, Dtype dtype, int64_t n, float* amax, cudaStream_t stream);

// Tensorwise, after launch_amax: src [rows, cols] scaled by the one scale
// from *amax into out [rows, cols] and, when out_t is not null, out_t [cols,
// rows] (the same bytes transposed, through shared-memory tiles); writes
// *scale_inv. Reads src once.
cudaError_t launch_cast_tensorwise(const void* src, Dtype dtype, int64_t rows, int64_t cols, const float* amax,
                                   Fp8 fmt, bool power_of_2, float* scale_inv, void* out, void* out_t,
                                   cudaStream_t stream);

// Rowwise: one block a row computes the row's amax, its scale and the cast
// (the second read of the row comes from L2): out [rows, cols], scale_inv
// and amax [rows].
cudaError_t launch_cast_rowwise(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt, bool power_of_2,
                                void* out, float* scale_inv, float* amax, cudaStream_t stream);

// Columnwise into the transposed layout: amax of each column of src (amax
// [cols] must hold zeros before), then out_t [cols, rows] with row c of
// out_t scaled by column c's scale; scale_inv [cols]. Two passes.
cudaError_t launch_cast_columnwise_transposed(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt,
                                              bool power_of_2, void* out_t, float* scale_inv, float* amax,
                                              cudaStream_t stream);

// Blocks of 1 x kBlock (128) values along each row (a partial block at the
// end), each scaled by its own amax: a warp a block, one read of src. out
// [rows, cols]; scale_inv and amax [rows, ⌈cols/128⌉].
cudaError_t launch_cast_blocks_1x128(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt,
                                     bool power_of_2, void* out, float* scale_inv, float* amax, cudaStream_t stream);

// The same blocks of srcᵀ [cols, rows] (runs of 128 rows of a column of
// src), written transposed: out_t [cols, rows]; scale_inv_t and amax_t
// [cols, ⌈rows/128⌉]. A block of threads a tile of 128 rows x 32 columns:
// the column amaxes, then the cast through shared memory (the second read
// of the tile comes from L1/L2).
cudaError_t launch_cast_blocks_1x128_transposed(const void* src, Dtype dtype, int64_t rows, int64_t cols, Fp8 fmt,
                                                bool power_of_2, void* out_t, float* scale_inv_t, float* amax_t,
                                                cudaStream_t stream);

}  // namespace stratum::nn::float8::cuda
