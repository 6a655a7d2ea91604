#include "stratum/nn/rms_norm.h"

#include <ATen/ATen.h>

namespace stratum::nn {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : torch::nn::Module("RMSNorm"), eps(eps) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

}  // namespace stratum::nn
