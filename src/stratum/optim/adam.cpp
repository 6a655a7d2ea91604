#include "stratum/optim/adam.h"

#include <string>

#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/where.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include "stratum/core/error.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "stratum/optim/mixed_adam_cuda.h"
#endif

namespace stratum::optim {
namespace {

void check_like_params(const at::Tensor& params, const at::Tensor& t, const char* what) {
  if (!t.defined() || t.scalar_type() != at::kFloat || t.device() != params.device() ||
      t.numel() != params.numel())
    throw Error(std::string("adam_step: ") + what + " must be an fp32 tensor of " + std::to_string(params.numel()) +
                " elements on " + params.device().str() +
                (t.defined() ? std::string(", got ") + std::string(c10::toString(t.scalar_type())) + " of " +
                                   std::to_string(t.numel()) + " on " + t.device().str()
                             : std::string(", got an undefined tensor")));
}

// bias_correction false: torch's fused kernels always divide by 1 - beta^step,
// so the same update from plain ATen ops, a chunk at a time (the temporaries
// stay small), in this order:
//   g = grad / grad_scale (written back, as the fused kernels do);
//   decoupled: p *= 1 - lr wd;  L2: g += wd p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  p -= lr m / (sqrt(v) + eps)
// With found_inf holding 1 nothing changes: each result is committed through
// where(found_inf == 0, new, old), on the device, without a host sync.
void adam_step_uncorrected(at::Tensor& params, const at::Tensor& grads, AdamState& state,
                           const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
                           const at::Tensor& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const double beta1 = beta1_override.value_or(optimizer.beta1), beta2 = optimizer.beta2;
  const double wd = optimizer.weight_decay;
  const bool decoupled = decoupled_weight_decay(optimizer);
  const at::Tensor keep = found_inf ? found_inf->reshape({}).eq(0) : at::Tensor();
  auto commit = [&](const at::Tensor& dst, const at::Tensor& value) {
    dst.copy_(keep.defined() ? at::where(keep, value, dst) : value);
  };
  constexpr int64_t kChunk = int64_t{1} << 24;
  const int64_t n = params.numel();
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t len = std::min(kChunk, n - off);
    at::Tensor p = params.narrow(0, off, len), m = state.exp_avg.narrow(0, off, len),
               v = state.exp_avg_sq.narrow(0, off, len), g_in = grads.narrow(0, off, len);
    at::Tensor g = g_in;
    if (grad_scale.defined()) {
      g = g_in / grad_scale.reshape({});
      commit(g_in, g);
    }
    at::Tensor p_new = p;
    if (wd != 0.0) {
      if (decoupled) p_new = p * (1.0 - lr * wd);
      else g = g.add(p, wd);
    }
    const at::Tensor m_new = m.mul(beta1).add_(g, 1.0 - beta1);
    const at::Tensor v_new = v.mul(beta2).addcmul_(g, g, 1.0 - beta2);
    p_new = p_new.addcdiv(m_new, v_new.sqrt().add_(optimizer.eps), -lr);
    commit(m, m_new);
    commit(v, v_new);
    commit(p, p_new);
  }
  state.step.add_(1);
  if (found_inf) state.step.sub_(found_inf->reshape({}));
}

}  // namespace

bool decoupled_weight_decay(const config::OptimizerConfig& optimizer) {
  return optimizer.type == config::OptimizerType::AdamW || optimizer.adam_w_mode;
}

AdamState make_adam_state(const at::Tensor& params_fp32) {
  const auto options = params_fp32.options().dtype(at::kFloat);
  return AdamState{at::zeros_like(params_fp32, options), at::zeros_like(params_fp32, options),
                   at::zeros({}, options)};
}

void adam_step(at::Tensor& params_fp32, const at::Tensor& grads_fp32, AdamState& state,
               const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
               double grad_scale, const std::optional<at::Tensor>& found_inf) {
  const at::Tensor scale =
      grad_scale != 1.0 ? at::full({}, grad_scale, params_fp32.options().dtype(at::kFloat)) : at::Tensor();
  adam_step(params_fp32, grads_fp32, state, optimizer, lr, beta1_override, scale, found_inf);
}

void adam_step(at::Tensor& params_fp32, const at::Tensor& grads_fp32, AdamState& state,
               const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
               const at::Tensor& grad_scale, const std::optional<at::Tensor>& found_inf) {
  if (!params_fp32.defined() || params_fp32.scalar_type() != at::kFloat)
    throw Error("adam_step: params must be a defined fp32 tensor");
  check_like_params(params_fp32, grads_fp32, "grads");
  check_like_params(params_fp32, state.exp_avg, "state.exp_avg");
  check_like_params(params_fp32, state.exp_avg_sq, "state.exp_avg_sq");
  if (!state.step.defined() || state.step.numel() != 1 || state.step.scalar_type() != at::kFloat ||
      state.step.device() != params_fp32.device())
    throw Error("adam_step: state.step must be a 1-element fp32 tensor on " + params_fp32.device().str());
  if (found_inf && (found_inf->numel() != 1 || found_inf->scalar_type() != at::kFloat ||
                    found_inf->device() != params_fp32.device()))
    throw Error("adam_step: found_inf must be a 1-element fp32 tensor on " + params_fp32.device().str());
  if (grad_scale.defined() && (grad_scale.numel() != 1 || grad_scale.scalar_type() != at::kFloat ||
                               grad_scale.device() != params_fp32.device()))
    throw Error("adam_step: grad_scale must be a 1-element fp32 tensor on " + params_fp32.device().str());
  std::optional<at::Tensor> scale;
  if (grad_scale.defined()) scale = grad_scale.reshape({});
  if (!optimizer.bias_correction) {
    adam_step_uncorrected(params_fp32, grads_fp32, state, optimizer, lr, beta1_override, grad_scale, found_inf);
    return;
  }

  // The kernels read the step count (for bias correction) but leave incrementing
  // it to the caller, as torch.optim does; a found_inf step is taken back.
  state.step.add_(1);
  const double beta1 = beta1_override.value_or(optimizer.beta1);
  const at::Tensor params[] = {params_fp32}, grads[] = {grads_fp32}, exp_avgs[] = {state.exp_avg},
                   exp_avg_sqs[] = {state.exp_avg_sq}, steps[] = {state.step};
  if (decoupled_weight_decay(optimizer))
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, optimizer.beta2,
                      optimizer.weight_decay, optimizer.eps, /*amsgrad=*/false, /*maximize=*/false, scale, found_inf);
  else
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, optimizer.beta2,
                     optimizer.weight_decay, optimizer.eps, /*amsgrad=*/false, /*maximize=*/false, scale, found_inf);
  if (found_inf) state.step.sub_(found_inf->reshape({}));
}

bool mixed_adam_available(c10::Device device) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

#ifdef STRATUM_WITH_CUDA_KERNELS
namespace {
cuda::Dtype kernel_dtype(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return cuda::Dtype::f32;
    case at::kBFloat16: return cuda::Dtype::bf16;
    case at::kHalf: return cuda::Dtype::f16;
    default:
      throw Error(std::string("adam_step_mixed: ") + what + " must be fp32, bf16 or fp16, got " +
                  c10::toString(t.scalar_type()));
  }
}
void check_flat(const at::Tensor& master, const at::Tensor& t, const char* what) {
  if (!t.is_contiguous() || t.numel() != master.numel() || t.device() != master.device())
    throw Error(std::string("adam_step_mixed: ") + what + " must be contiguous with " +
                std::to_string(master.numel()) + " elements on " + master.device().str());
}
}  // namespace
#endif

void adam_step_mixed(at::Tensor& master, const at::Tensor& grads, AdamState& state,
                     const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
                     const at::Tensor& grad_scale, const at::Tensor& params16) {
  if (!master.defined() || !mixed_adam_available(master.device()))
    throw Error("adam_step_mixed: needs a CUDA build with Stratum's kernels and the master on a GPU (got " +
                (master.defined() ? master.device().str() : std::string("an undefined tensor")) + ")");
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (master.scalar_type() != at::kFloat || !master.is_contiguous())
    throw Error("adam_step_mixed: the master must be a contiguous fp32 tensor");
  check_like_params(master, state.exp_avg, "state.exp_avg");
  check_like_params(master, state.exp_avg_sq, "state.exp_avg_sq");
  check_flat(master, state.exp_avg, "state.exp_avg");
  check_flat(master, state.exp_avg_sq, "state.exp_avg_sq");
  check_flat(master, grads, "grads");
  if (params16.defined()) check_flat(master, params16, "params16");
  if (!state.step.defined() || state.step.numel() != 1 || state.step.scalar_type() != at::kFloat ||
      state.step.device() != master.device())
    throw Error("adam_step_mixed: state.step must be a 1-element fp32 tensor on " + master.device().str());
  if (grad_scale.defined() && (grad_scale.numel() != 1 || grad_scale.scalar_type() != at::kFloat ||
                               grad_scale.device() != master.device()))
    throw Error("adam_step_mixed: grad_scale must be a 1-element fp32 tensor on " + master.device().str());
  c10::cuda::CUDAGuard guard(master.device());
  state.step.add_(1);
  cuda::MixedAdamArgs a;
  a.n = master.numel();
  a.master = master.data_ptr<float>();
  a.exp_avg = state.exp_avg.data_ptr<float>();
  a.exp_avg_sq = state.exp_avg_sq.data_ptr<float>();
  a.grad = grads.const_data_ptr();
  a.grad_dtype = kernel_dtype(grads, "grads");
  if (params16.defined()) {
    a.params16 = params16.data_ptr();
    a.params16_dtype = kernel_dtype(params16, "params16");
  }
  a.step = state.step.const_data_ptr<float>();
  a.grad_scale = grad_scale.defined() ? grad_scale.const_data_ptr<float>() : nullptr;
  a.lr = static_cast<float>(lr);
  a.beta1 = static_cast<float>(beta1_override.value_or(optimizer.beta1));
  a.beta2 = static_cast<float>(optimizer.beta2);
  a.eps = static_cast<float>(optimizer.eps);
  a.weight_decay = static_cast<float>(optimizer.weight_decay);
  a.decoupled = decoupled_weight_decay(optimizer);
  a.bias_correction = optimizer.bias_correction;
  stratum::cuda::check_launch(cuda::launch_mixed_adam(a, c10::cuda::getCurrentCUDAStream().stream()),
                              "adam_step_mixed: kernel launch failed");
#else
  (void)grads, (void)state, (void)optimizer, (void)lr, (void)beta1_override, (void)grad_scale, (void)params16;
#endif
}

}  // namespace stratum::optim
