#pragma once
// The column- and row-parallel projections (layers.h) with their GEMMs in
// FP8 (nn/float8/float8_linear.h), and the amax reductions their shards need
// so that TP = t casts every operand as TP = 1 does.
//
// Which amax is reduced (max over the group), by the axis the shards split
// and the scale's span (nn/float8/cast.h, cast_shard):
//
//   column-parallel (W [N/t, K], dy [M, N/t] shards; x whole on every rank):
//     tensorwise  W and dy: each rank holds a part of the whole tensor
//     rowwise     dy's rows and Wᵀ's rows (W's columns) in dx = dy W, whose
//                 contraction axis N is split; not x, W's rows or the
//                 transposed copies in dW = dyᵀ x (their rows are whole)
//   row-parallel (x [M, K/t], W [N, K/t] shards; dy whole on every rank):
//     tensorwise  x and W
//     rowwise     x's and W's rows in y = x Wᵀ (contraction K split); not
//                 dx = dy W's operands or dW's (their rows are whole)
//
// Under sequence parallelism the column-parallel input is gathered along the
// sequence before its cast and the row-parallel gradient arrives gathered:
// the same operands are whole, the same ones reduced.
#include <ATen/core/Tensor.h>

#include <vector>

#include "stratum/nn/float8/float8_projection.h"
#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn::tp {

// The amax reductions of a projection split over `tp` along `axis` (output:
// column-parallel, contraction: row-parallel); nothing without a group of
// two or more.
void share_float8_amax(float8::Float8Projection& projection, float8::SplitAxis axis, const TensorParallel& tp);

// Whether the kernel that writes a projection's input (a norm, an
// activation) should hand over the input's amax from its own pass, sparing
// the cast its amax pass: the projection in FP8 with tensorwise scaling, and,
// column-parallel, its input not gathered along the sequence (under sequence
// parallelism each rank's kernel sees only its own rows).
bool row_input_takes_amax(const float8::Float8Projection* projection);
bool column_input_takes_amax(const float8::Float8Projection* projection, const TensorParallel& tp);

// column_parallel_linear with y = x [W0; W1; ...]ᵀ + b in FP8: x enters the
// region (gathered along the sequence under sequence parallelism; the
// gathered copy is not kept: the FP8 GEMMs keep x's own FP8 copy).
// x_amax (optional, only where column_input_takes_amax): max |x| from the
// kernel that wrote x.
at::Tensor column_parallel_float8_linear(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                         const at::Tensor& bias, float8::Float8Projection& projection,
                                         const TensorParallel& tp, const at::Tensor& x_amax = at::Tensor());
// row_parallel_linear in FP8: the partial products summed over the group
// (reduce-scattered along the sequence under sequence parallelism), then
// the bias; without a group, the bias inside the GEMM.
// x_amax (optional): this rank's max |x| from the kernel that wrote x (float8_linear's).
at::Tensor row_parallel_float8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                      float8::Float8Projection& projection, const TensorParallel& tp,
                                      const at::Tensor& x_amax = at::Tensor());

}  // namespace stratum::nn::tp
