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

// The same without bias for wide outputs whose width is not a multiple of 64
// (GPT-2's 50257-token vocabulary): the output rows are laid out 64-element
// aligned (a [..., out] view of a wider buffer), and so is the gradient the
// backward multiplies with. cuBLAS's fast Hopper kernels need aligned leading
// dimensions; at 50257 it falls back to sm75 kernels about 4x slower, which
// made the LM head a fifth of a GPT-2 1.3B step. Same values as linear().
at::Tensor linear_aligned_rows(const at::Tensor& x, const at::Tensor& weight);

// [rows, cols] with each row's stride rounded up to 64 elements: a view of a
// [rows, round_up(cols, 64)] buffer (contiguous when cols is a multiple of 64).
at::Tensor empty_aligned_rows(int64_t rows, int64_t cols, const at::TensorOptions& options);

}  // namespace stratum::nn
