#pragma once
// The two feed-forward blocks, named as in Hugging Face:
//   GeluMLP   (GPT-2): c_proj(gelu_tanh(c_fc(x))), biases; GPT-2's "gelu_new" is
//                      the tanh approximation of GELU.
//   SwiGLUMLP (LLaMA): down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
// With `recompute_activation` the activation's output is not kept for
// backward but recomputed there (nn::gelu_mlp, nn::swiglu_linear).
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>

namespace stratum::nn {

class GeluMLPImpl : public torch::nn::Module {
 public:
  GeluMLPImpl(int64_t hidden, int64_t ffn_hidden, double dropout, bool recompute_activation = false);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  double dropout;
  bool recompute_activation;
};

class SwiGLUMLPImpl : public torch::nn::Module {
 public:
  SwiGLUMLPImpl(int64_t hidden, int64_t ffn_hidden, bool recompute_activation = false);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  bool recompute_activation;
};

}  // namespace stratum::nn
