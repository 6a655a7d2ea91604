#include "stratum/nn/mlp.h"

#include <ATen/ATen.h>

#include "stratum/nn/fused_ops.h"
#include "stratum/nn/linear.h"

namespace stratum::nn {

GeluMLPImpl::GeluMLPImpl(int64_t hidden, int64_t ffn_hidden, double dropout, bool recompute_activation)
    : torch::nn::Module("GeluMLP"), dropout(dropout), recompute_activation(recompute_activation) {
  c_fc = register_module("c_fc", torch::nn::Linear(hidden, ffn_hidden));
  c_proj = register_module("c_proj", torch::nn::Linear(ffn_hidden, hidden));
}

at::Tensor GeluMLPImpl::forward(const at::Tensor& x) {
  at::Tensor y = nn::gelu_mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias,
                              /*keep_activation=*/!recompute_activation);
  return is_training() && dropout > 0 ? at::dropout(y, dropout, /*train=*/true) : y;
}

SwiGLUMLPImpl::SwiGLUMLPImpl(int64_t hidden, int64_t ffn_hidden, bool recompute_activation)
    : torch::nn::Module("SwiGLUMLP"), recompute_activation(recompute_activation) {
  auto linear = [](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  gate_proj = register_module("gate_proj", linear(hidden, ffn_hidden));
  up_proj = register_module("up_proj", linear(hidden, ffn_hidden));
  down_proj = register_module("down_proj", linear(ffn_hidden, hidden));
}

at::Tensor SwiGLUMLPImpl::forward(const at::Tensor& x) {
  // Gate and up projections as one GEMM over the stacked weights.
  const at::Tensor gate_up = nn::linear_stacked(x, {gate_proj->weight, up_proj->weight});
  return recompute_activation ? nn::swiglu_linear(gate_up, down_proj->weight)
                              : nn::linear(nn::swiglu(gate_up), down_proj->weight);
}

}  // namespace stratum::nn
