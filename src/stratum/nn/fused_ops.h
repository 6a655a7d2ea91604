#pragma once
// Elementwise steps of the transformer blocks as single autograd functions:
// one CUDA kernel each way on a GPU (nn/fused_elementwise_cuda.cu), the ATen
// composition elsewhere (the CPU path the tests compare against).
#include <ATen/core/Tensor.h>

#include <utility>

namespace stratum::nn {

// silu(gate) * up for gate_up = [..., 2F] (gate first, as linear_stacked
// returns it): [..., F]. Saves only gate_up for backward (autograd's chain
// kept silu(gate) as well) and returns the gradient as one [..., 2F] tensor.
at::Tensor swiglu(const at::Tensor& gate_up);

// gelu_tanh(x Wᵀ + b): GPT-2's first MLP layer. The backward computes the
// GELU derivative and the bias gradient in one pass over the pre-activation.
at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// RoPE: x * cos + rotate_half(x) * sin for x [..., seq, head_dim] and
// constant cos/sin [seq, head_dim] (no gradient for them); its backward is
// the rotation's transpose, one kernel each way on a GPU.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// h = x + branch and LayerNorm(h) (weight, bias [C]): a block's residual add
// and the norm after it, returned as (h, normed). The backward adds h's
// gradient from the residual stream into LayerNorm's input gradient in one
// pass on a GPU, and computes the weight and bias gradients as column sums.
std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& branch,
                                                 const at::Tensor& weight, const at::Tensor& bias, double eps);

// LayerNorm(x) over the last dimension (weight, bias [C]); on a GPU its
// backward is the kernels add_layer_norm uses, without the residual term.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

// The bias gradient of a linear: the column sums of g [rows, out], fp32 sums
// rounded to g's dtype (not an autograd function; backward passes call it).
at::Tensor bias_grad(const at::Tensor& g);

}  // namespace stratum::nn
