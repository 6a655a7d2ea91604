#pragma once
// y = x Wᵀ + b, with a backward that saves the weight parameter itself rather
// than a view of it (at::linear saves weight.t(), which keeps the weight's
// storage alive). ZeRO-3 swaps a parameter's storage out after its layer runs
// and back in before the layer's backward; a saved view would pin the old
// storage (no memory freed) while the saved parameter follows the swap.
// Every layer in nn/ uses this linear, so the same math runs at every stage.
#include <ATen/core/Tensor.h>

namespace stratum::nn {

// x: [..., in], weight: [out, in], bias: [out] or undefined.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

}  // namespace stratum::nn
