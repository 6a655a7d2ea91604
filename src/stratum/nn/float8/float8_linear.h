#pragma once
// y = x [W0; W1; ...]ᵀ (+ b) with its three GEMMs in FP8 (nn/float8/scaled_gemm.h):
// the forward y = x Wᵀ, and in backward dx = dy W and dW = dyᵀ x, each
// through _scaled_mm with the projection's recipe, results in x's dtype
// (bf16 in training). The forward casts x once, with its transposed copy
// saved for dW in FP8 (half of bf16's bytes); W and Wᵀ come from the
// projection's cache (cast once an optimizer step; when the cache holds no
// weights, ZeRO-3, W at each forward or from the FP8 gather, and Wᵀ in
// backward). A projection split over a tensor-parallel group
// (Float8Projection::share_amax) casts each operand as its slice of the whole
// one would be (cast_shard). The bias's gradient is the column sums of dy in
// its own dtype. The weight gradient goes where a bf16 linear's would
// (nn/linear.h, write_weight_grads): into a registered WeightGradSink (ZeRO's
// fp32 flat gradient), queued for W under a DeferWeightGrads scope (zb-h1),
// else returned to autograd.
#include <ATen/core/Tensor.h>

#include <vector>

#include "stratum/nn/float8/float8_projection.h"

namespace stratum::nn::float8 {

// x [..., K]; weights [N_i, K] (their rows stacked: y's last dimension is
// their sum, in order); bias [sum N_i] or undefined. x_amax (optional): max
// |x| from the kernel that wrote x (nn::swiglu's), which a tensorwise cast
// on the GPU then need not take again (cast_shard's known_amax).
at::Tensor float8_linear(const at::Tensor& x, const std::vector<at::Tensor>& weights, const at::Tensor& bias,
                         Float8Projection& projection, const at::Tensor& x_amax = at::Tensor());

}  // namespace stratum::nn::float8
