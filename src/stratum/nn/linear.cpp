#include "stratum/nn/linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/nn/fused_ops.h"

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
  if (with_bias && ctx->needs_input_grad(2)) gb = bias_grad(g2.contiguous());
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

// y = x [W0; W1; ...]ᵀ: one GEMM for projections that read the same input
// (q/k/v, gate/up). The stacked weight is a temporary of each pass; the
// parameters themselves are saved, as in LinearNoBias.
struct LinearStacked : torch::autograd::Function<LinearStacked> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights) {
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    return at::linear(x, at::cat(weights, 0));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const std::vector<at::Tensor> weights(saved.begin() + 1, saved.end());
    const at::Tensor& grad = grads[0];
    variable_list out(saved.size());
    if (ctx->needs_input_grad(0)) out[0] = grad.matmul(at::cat(weights, 0));
    bool any_weight = false;
    for (size_t i = 1; i < saved.size(); ++i) any_weight = any_weight || ctx->needs_input_grad(i);
    if (any_weight) {
      const at::Tensor gw = grad.reshape({-1, grad.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));
      int64_t row = 0;
      for (size_t i = 1; i < saved.size(); ++i) {
        if (ctx->needs_input_grad(i)) out[i] = gw.narrow(0, row, saved[i].size(0));
        row += saved[i].size(0);
      }
    }
    return out;
  }
};

constexpr int64_t kRowAlign = 64;

int64_t padded(int64_t n) { return (n + kRowAlign - 1) / kRowAlign * kRowAlign; }

// `t` with zeros appended along `dim` up to a multiple of kRowAlign.
at::Tensor pad_with_zeros(const at::Tensor& t, int64_t dim) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[dim] = padded(t.size(dim));
  at::Tensor out = at::empty(sizes, t.options());
  out.narrow(dim, 0, t.size(dim)).copy_(t);
  out.narrow(dim, t.size(dim), sizes[dim] - t.size(dim)).zero_();
  return out;
}

struct LinearPaddedRows : torch::autograd::Function<LinearPaddedRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    const at::Tensor out = x.reshape({-1, x.size(-1)}).mm(pad_with_zeros(w, 0).t());  // [N, padded(V)]
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    return out.narrow(1, 0, w.size(0)).view(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    // The gradient padded with zero columns: [N, padded(V)]. The weight is
    // padded again rather than saved: ZeRO-3 releases it between forward and
    // backward, and a saved copy would pin V x C more for the whole step.
    const at::Tensor g = pad_with_zeros(grads[0].reshape({-1, w.size(0)}), 1);
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) gx = g.mm(pad_with_zeros(w, 0)).view(x.sizes());
    if (ctx->needs_input_grad(1)) gw = g.t().mm(x.reshape({-1, x.size(-1)})).narrow(0, 0, w.size(0));
    return {gx, gw};
  }
};

}  // namespace

at::Tensor linear_padded_rows(const at::Tensor& x, const at::Tensor& weight) {
  if (weight.size(0) % kRowAlign == 0) return LinearNoBias::apply(x, weight);
  return LinearPaddedRows::apply(x, weight);
}

at::Tensor linear_stacked(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  if (weights.size() == 1) return LinearNoBias::apply(x, weights.front());
  return LinearStacked::apply(x, at::TensorList(weights));
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return bias.defined() ? LinearBias::apply(x, weight, bias) : LinearNoBias::apply(x, weight);
}

}  // namespace stratum::nn
