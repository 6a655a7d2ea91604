#pragma once
// LayerNorm (GPT-2) as autograd functions whose backward computes the weight
// and bias gradients as column sums (ATen's kernel for them took three times
// as long on an H200): one pass a row for the input gradient on a GPU
// (nn/fused_elementwise_cuda.cu), ATen's backward elsewhere (the CPU path the
// tests compare against).
#include <ATen/core/Tensor.h>

#include <utility>

namespace stratum::nn {

// LayerNorm(x) over the last dimension (weight, bias [C]); on a GPU its
// backward is the kernels add_layer_norm uses, without the residual term.
// With `amax`: where the GPU kernel runs (nn/norm_forward.h), set to max
// |output| (fp32 0-dim) from the forward's own pass, for an FP8 projection's
// tensorwise cast of the output; elsewhere ATen's forward, amax undefined.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                      at::Tensor* amax = nullptr);

// h = x + branch and LayerNorm(h) (weight, bias [C]): a block's residual add
// and the norm after it, returned as (h, normed). The backward adds h's
// gradient from the residual stream into LayerNorm's input gradient in one
// pass on a GPU, and computes the weight and bias gradients as column sums.
// `amax` as layer_norm's, of normed.
std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& branch,
                                                 const at::Tensor& weight, const at::Tensor& bias, double eps,
                                                 at::Tensor* amax = nullptr);

}  // namespace stratum::nn
