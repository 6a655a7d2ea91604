#pragma once
// y = x Wᵀ + b, with a backward that saves the weight parameter itself rather
// than a view of it (at::linear saves weight.t(), which keeps the weight's
// storage alive). ZeRO-3 swaps a parameter's storage out after its layer runs
// and back in before the layer's backward; a saved view would pin the old
// storage (no memory freed) while the saved parameter follows the swap.
// Every layer in nn/ uses this linear, so the same math runs at every stage.
#include <ATen/core/Tensor.h>

#include <vector>

namespace stratum::nn {

// x: [..., in], weight: [out, in], bias: [out] or undefined.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

// x [W0; W1; ...]ᵀ without bias, the weights stacked along the output
// dimension: one GEMM (and one input-gradient GEMM) for projections of the
// same input; split the result along the last dimension. Weights: [out_i, in].
at::Tensor linear_stacked(const at::Tensor& x, const std::vector<at::Tensor>& weights);

// A linear without bias for wide outputs whose width is not a multiple of 64
// (GPT-2's 50257-token vocabulary): the product runs on the weight padded
// with zero rows to a multiple of 64 and returns the [..., out] view of the
// wider result; the backward pads the incoming gradient the same way. cuBLAS
// picks its fast Hopper kernels only for aligned shapes: at 50257 it fell
// back to sm75 kernels about 4x slower, a fifth of a GPT-2 1.3B step. Same
// values as linear() (the padding contributes exact zeros).
at::Tensor linear_padded_rows(const at::Tensor& x, const at::Tensor& weight);

}  // namespace stratum::nn
