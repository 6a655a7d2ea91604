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

// gelu_tanh(x Wᵀ + b): GPT-2's first MLP layer. On a GPU in 16 bits one
// cuBLASLt GEMM computes both; the backward computes the GELU derivative and
// the bias gradient in one pass over the pre-activation.
at::Tensor linear_bias_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// GPT-2's MLP, gelu_tanh(x W1ᵀ + b1) W2ᵀ + b2, as one function: on a GPU in
// 16 bits the forward's GELU runs in the first GEMM's epilogue (cuBLASLt),
// the backward's derivative and b1's gradient in one pass over the
// pre-activation, as linear_bias_gelu's. It saves x and the pre-activation, and
// gelu(h) with `keep_activation`; without it (ffn elements a token and layer
// less, half the MLP's saved activations) the backward recomputes gelu(h).
// Same values as the separate ops; the weights' gradients go to their sinks
// (nn/linear.h).
at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2,
                    const at::Tensor& b2, bool keep_activation = false);

// LLaMA's MLP end with the SwiGLU's output not kept for backward (a third of
// the MLP's saved activations): the backward recomputes it in the pass that
// computes its derivative (one more store). Same values as the separate ops;
// W_down's gradient goes to its sink (nn/linear.h).
// swiglu(gate_up) W_downᵀ: saves gate_up.
at::Tensor swiglu_linear(const at::Tensor& gate_up, const at::Tensor& w_down);

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
