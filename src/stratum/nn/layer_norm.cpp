#include "stratum/nn/layer_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "stratum/core/error.h"
#include "stratum/nn/norm_forward.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/kernel_launch.h"
#endif

namespace stratum::nn {
namespace {

struct LayerNormGrads {
  at::Tensor input, weight, bias;
};

// LayerNorm's backward at its input h (saved mean and rstd from
// native_layer_norm), with `dh_ext` (the gradient h also gets from the
// residual stream; may be undefined) added to the input gradient in the same
// pass on a GPU. The weight and bias gradients are column sums.
LayerNormGrads layer_norm_backward(const at::Tensor& h, const at::Tensor& dy, const at::Tensor& dh_ext,
                                   const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& mean,
                                   const at::Tensor& rstd, bool weight_grad, bool bias_grad) {
  const int64_t cols = h.size(-1);
#ifdef STRATUM_WITH_CUDA_KERNELS
  const int64_t rows = cols == 0 ? 0 : h.numel() / cols;
  if (cuda::use_kernels({&h, &dy, &weight, &bias}) && (!dh_ext.defined() || cuda::use_kernels({&h, &dh_ext})) &&
      mean.scalar_type() == at::kFloat && rstd.scalar_type() == at::kFloat && mean.is_contiguous() &&
      rstd.is_contiguous()) {
    c10::cuda::CUDAGuard guard(h.device());
    cuda::LayerNormBackward a;
    a.h = h.const_data_ptr();
    a.dy = dy.const_data_ptr();
    a.dh_ext = dh_ext.defined() ? dh_ext.const_data_ptr() : nullptr;
    a.gamma = weight.const_data_ptr();
    a.mean = mean.const_data_ptr<float>();
    a.rstd = rstd.const_data_ptr<float>();
    a.rows = rows;
    a.cols = cols;
    LayerNormGrads g{at::empty_like(h)};
    a.dh = g.input.data_ptr();
    cuda::check_launch(cuda::launch_layer_norm_backward_input(a, cuda::dtype_of(h), cuda::current_stream()),
                       "fused elementwise kernel: layer norm backward");
    if (weight_grad || bias_grad) {
      g.weight = at::empty_like(weight);
      g.bias = at::empty_like(bias);
      const at::Tensor workspace = cuda::column_sum_workspace(h, rows, cols);
      cuda::check_launch(cuda::launch_layer_norm_backward_params(a, cuda::dtype_of(h), workspace.data_ptr<float>(),
                                                                 g.weight.data_ptr(), g.bias.data_ptr(),
                                                                 cuda::current_stream()),
                         "fused elementwise kernel: layer norm parameter gradients");
    }
    return g;
  }
#endif
  auto [dx, dgamma, dbeta] =
      at::native_layer_norm_backward(dy, h, {cols}, mean, rstd, weight, bias, {true, weight_grad, bias_grad});
  return {dh_ext.defined() ? dx + dh_ext : dx, dgamma, dbeta};
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// native_layer_norm's (y, mean, rstd); with `amax`, where the kernel runs,
// from the kernel that also sets *amax to max |y| (else *amax undefined).
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_forward(const at::Tensor& h, const at::Tensor& weight,
                                                                 const at::Tensor& bias, double eps,
                                                                 at::Tensor* amax) {
  if (amax && norm_kernel_usable(h, weight, bias)) {
    NormForwardResult r = norm_forward_with_amax(h, weight, bias, eps);
    *amax = r.amax;
    return {r.y, r.mean, r.rstd};
  }
  if (amax) *amax = at::Tensor();
  return at::native_layer_norm(h, {h.size(-1)}, weight, bias, eps);
}

// y = LayerNorm(x) with the backward above (ATen's weight/bias gradient
// kernel took three times as long as the column sums on an H200).
struct LayerNorm : torch::autograd::Function<LayerNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, at::Tensor* amax) {
    const at::Tensor xc = x.contiguous();
    auto [y, mean, rstd] = layer_norm_forward(xc, weight, bias, eps, amax);
    ctx->save_for_backward({xc, weight, bias, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const LayerNormGrads g = layer_norm_backward(saved[0], grads[0].contiguous(), at::Tensor(), saved[1], saved[2],
                                                 saved[3], saved[4], ctx->needs_input_grad(1),
                                                 ctx->needs_input_grad(2));
    return {g.input, g.weight, g.bias, at::Tensor(), at::Tensor()};
  }
};

// h = x + branch and y = LayerNorm(h): the residual add and the next norm of a
// block. The backward adds h's own gradient (from the residual stream after
// it) to LayerNorm's input gradient in the same pass: autograd would run
// LayerNorm's backward, then an add.
struct AddLayerNorm : torch::autograd::Function<AddLayerNorm> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch,
                               const at::Tensor& weight, const at::Tensor& bias, double eps, at::Tensor* amax) {
    const at::Tensor h = x + branch;
    auto [y, mean, rstd] = layer_norm_forward(h, weight, bias, eps, amax);
    ctx->save_for_backward({h, weight, bias, mean, rstd});
    return {h, y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor dh_ext = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    if (!grads[1].defined()) return {dh_ext, dh_ext, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const LayerNormGrads g = layer_norm_backward(saved[0], grads[1].contiguous(), dh_ext, saved[1], saved[2],
                                                 saved[3], saved[4], ctx->needs_input_grad(2),
                                                 ctx->needs_input_grad(3));
    return {g.input, g.input, g.weight, g.bias, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& branch,
                                                 const at::Tensor& weight, const at::Tensor& bias, double eps,
                                                 at::Tensor* amax) {
  if (!weight.defined() || !bias.defined() || weight.dim() != 1 || weight.size(0) != x.size(-1) ||
      bias.sizes() != weight.sizes() || x.sizes() != branch.sizes())
    throw Error("add_layer_norm: need x and branch of one shape [..., C] and weight, bias [C]; got x " +
                c10::str(x.sizes()) + ", branch " + c10::str(branch.sizes()) + ", weight " +
                (weight.defined() ? c10::str(weight.sizes()) : std::string("undefined")));
  auto out = AddLayerNorm::apply(x, branch, weight, bias, eps, amax);
  return {out[0], out[1]};
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                      at::Tensor* amax) {
  if (!weight.defined() || !bias.defined() || weight.dim() != 1 || x.dim() < 1 || weight.size(0) != x.size(-1) ||
      bias.sizes() != weight.sizes())
    throw Error("layer_norm: need x [..., C] and weight, bias [C]; got x " + c10::str(x.sizes()) + ", weight " +
                (weight.defined() ? c10::str(weight.sizes()) : std::string("undefined")) + ", bias " +
                (bias.defined() ? c10::str(bias.sizes()) : std::string("undefined")));
  return LayerNorm::apply(x, weight, bias, eps, amax);
}

}  // namespace stratum::nn
