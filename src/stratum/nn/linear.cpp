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

constexpr int64_t kRowAlign = 64;

bool rows_aligned(const at::Tensor& t) { return t.stride(1) == 1 && t.stride(0) % kRowAlign == 0; }

struct LinearAlignedRows : torch::autograd::Function<LinearAlignedRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    at::Tensor out = empty_aligned_rows(x2.size(0), w.size(0), x.options());
    at::mm_out(out, x2, w.t());
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    return out.view(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    at::Tensor g2 = grads[0].reshape({-1, w.size(0)});
    if (!rows_aligned(g2)) {  // e.g. a loss that returned a contiguous [N, V] gradient
      at::Tensor aligned = empty_aligned_rows(g2.size(0), g2.size(1), g2.options());
      aligned.copy_(g2);
      g2 = aligned;
    }
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) gx = g2.mm(w).view(x.sizes());
    if (ctx->needs_input_grad(1)) gw = g2.t().mm(x.reshape({-1, x.size(-1)}));
    return {gx, gw};
  }
};

}  // namespace

at::Tensor empty_aligned_rows(int64_t rows, int64_t cols, const at::TensorOptions& options) {
  const int64_t padded = (cols + kRowAlign - 1) / kRowAlign * kRowAlign;
  at::Tensor buffer = at::empty({rows, padded}, options);
  return padded == cols ? buffer : buffer.narrow(1, 0, cols);
}

at::Tensor linear_aligned_rows(const at::Tensor& x, const at::Tensor& weight) {
  if (weight.size(0) % kRowAlign == 0) return LinearNoBias::apply(x, weight);
  return LinearAlignedRows::apply(x, weight);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return bias.defined() ? LinearBias::apply(x, weight, bias) : LinearNoBias::apply(x, weight);
}

}  // namespace stratum::nn
