#include "stratum/nn/norm_forward.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "stratum/core/error.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/kernel_launch.h"
#include "stratum/nn/norm_forward_cuda.h"
#endif

namespace stratum::nn {

bool norm_kernel_usable([[maybe_unused]] const at::Tensor& x, [[maybe_unused]] const at::Tensor& weight,
                        [[maybe_unused]] const at::Tensor& bias) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (!x.defined() || x.dim() < 1 || x.size(-1) == 0 || !weight.defined() || weight.dim() != 1 ||
      weight.size(0) != x.size(-1) || weight.device() != x.device())
    return false;
  if (bias.defined() && (bias.sizes() != weight.sizes() || !cuda::use_kernels({&x, &weight, &bias}))) return false;
  return cuda::use_kernels({&x, &weight});
#else
  return false;
#endif
}

NormForwardResult norm_forward_with_amax(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                         [[maybe_unused]] double eps) {
  if (!norm_kernel_usable(x, weight, bias))
    throw Error("norm_forward_with_amax: needs the CUDA kernels and x [..., C] contiguous on a GPU with weight" +
                std::string(bias.defined() ? " and bias" : "") + " [C] in its dtype; got x " +
                (x.defined() ? c10::str(x.sizes(), " ", x.scalar_type(), " on ", x.device()) : std::string("undefined")) +
                ", weight " +
                (weight.defined() ? c10::str(weight.sizes(), " ", weight.scalar_type()) : std::string("undefined")));
  NormForwardResult r;
#ifdef STRATUM_WITH_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> stat_shape(x.sizes().begin(), x.sizes().end());
  stat_shape.back() = 1;
  const auto f32 = x.options().dtype(at::kFloat);
  r.y = at::empty_like(x);
  r.rstd = at::empty(stat_shape, f32);
  if (bias.defined()) r.mean = at::empty(stat_shape, f32);
  r.amax = at::zeros({}, f32);
  cuda::NormForward a;
  a.x = x.const_data_ptr();
  a.gamma = weight.const_data_ptr();
  a.beta = bias.defined() ? bias.const_data_ptr() : nullptr;
  a.cols = x.size(-1);
  a.rows = x.numel() / a.cols;
  a.eps = static_cast<float>(eps);
  a.y = r.y.data_ptr();
  a.mean = bias.defined() ? r.mean.data_ptr<float>() : nullptr;
  a.rstd = r.rstd.data_ptr<float>();
  a.amax = r.amax.data_ptr<float>();
  cuda::check_launch(cuda::launch_norm_forward(a, cuda::dtype_of(x), cuda::current_stream()),
                     bias.defined() ? "layer norm forward kernel" : "RMS norm forward kernel");
#endif
  return r;
}

}  // namespace stratum::nn
