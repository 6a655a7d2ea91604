#include "stratum/nn/rms_norm.h"

#include <ATen/ATen.h>

#include "stratum/nn/deferred_init.h"

namespace stratum::nn {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, c10::Device device) : torch::nn::Module("RMSNorm"), eps(eps) {
  // The meta device asks for a skeleton's weight (nn/deferred_init.h).
  const auto options = at::TensorOptions().dtype(at::get_default_dtype()).device(device);
  weight = register_parameter("weight", device.is_meta() ? unmaterialized({dim}, at::typeMetaToScalarType(at::get_default_dtype()))
                                                        : at::ones({dim}, options));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  // ATen's fused kernel on a GPU (one pass each way; the eager composition
  // took eight kernels and kept an fp32 copy of x for backward). It wants the
  // weight in the input's dtype, as the engine keeps them.
  if (weight.scalar_type() == x.scalar_type()) return at::rms_norm(x, {x.size(-1)}, weight, eps);
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

}  // namespace stratum::nn
