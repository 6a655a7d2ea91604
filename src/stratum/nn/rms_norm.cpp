#include "stratum/nn/rms_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/nn/deferred_init.h"
#include "stratum/nn/norm_forward.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ATen's fused RMSNorm with the forward from the kernel that also takes max
// |y| (nn/norm_forward.h); the backward is ATen's, from the same saved rstd.
struct RMSNormWithAmax : torch::autograd::Function<RMSNormWithAmax> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps,
                            at::Tensor* amax) {
    NormForwardResult r = norm_forward_with_amax(x, weight, at::Tensor(), eps);
    ctx->save_for_backward({x, weight, r.rstd});
    *amax = r.amax;
    return r.y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, dweight] = at::_fused_rms_norm_backward(grads[0].contiguous(), saved[0], {saved[0].size(-1)}, saved[2],
                                                      saved[1], {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
    return {dx, dweight, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, c10::Device device) : torch::nn::Module("RMSNorm"), eps(eps) {
  // The meta device asks for a skeleton's weight (nn/deferred_init.h).
  const auto options = at::TensorOptions().dtype(at::get_default_dtype()).device(device);
  weight = register_parameter("weight", device.is_meta() ? unmaterialized({dim}, at::typeMetaToScalarType(at::get_default_dtype()))
                                                        : at::ones({dim}, options));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x, at::Tensor* amax) {
  if (amax) {
    *amax = at::Tensor();
    if (norm_kernel_usable(x, weight, at::Tensor()))  // x and weight in one dtype among its checks
      return RMSNormWithAmax::apply(x, weight, eps, amax);
  }
  // ATen's fused kernel on a GPU (one pass each way; the eager composition
  // took eight kernels and kept an fp32 copy of x for backward). It wants the
  // weight in the input's dtype, as the engine keeps them.
  if (weight.scalar_type() == x.scalar_type()) return at::rms_norm(x, {x.size(-1)}, weight, eps);
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

}  // namespace stratum::nn
