#include "stratum/nn/linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Gradients of y = x Wᵀ (+ b) from the saved input and the weight as it is now.
variable_list linear_backward(AutogradContext* ctx, const at::Tensor& grad, bool with_bias) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& w = saved[1];
  const at::Tensor g2 = grad.reshape({-1, grad.size(-1)});
  at::Tensor gx, gw, gb;
  if (ctx->needs_input_grad(0)) gx = grad.matmul(w);
  if (ctx->needs_input_grad(1)) gw = g2.t().mm(x.reshape({-1, x.size(-1)}));
  if (with_bias && ctx->needs_input_grad(2)) gb = g2.sum(0);
  return with_bias ? variable_list{gx, gw, gb} : variable_list{gx, gw};
}

struct LinearBias : torch::autograd::Function<LinearBias> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    ctx->save_for_backward({x, w});
    return at::linear(x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*with_bias=*/true);
  }
};

struct LinearNoBias : torch::autograd::Function<LinearNoBias> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return at::linear(x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*with_bias=*/false);
  }
};

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return bias.defined() ? LinearBias::apply(x, weight, bias) : LinearNoBias::apply(x, weight);
}

}  // namespace stratum::nn
