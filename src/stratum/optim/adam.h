#pragma once
// Adam / AdamW from the `optimizer` section over one flat fp32 tensor (what a
// ZeRO rank owns), through torch's fused kernels, which exist for CPU and CUDA:
// the same call runs on either device.
//   - AdamW, and Adam with adam_w_mode true (DeepSpeed's default): decoupled
//     weight decay, p <- p (1 - lr wd) - lr m^ / (sqrt(v^) + eps)  (at::_fused_adamw_)
//   - Adam with adam_w_mode false: L2, g <- g + wd p, then Adam  (at::_fused_adam_)
// Bias correction (m / (1 - b1^step), v / (1 - b2^step)) unless the config's
// bias_correction is false (DeepSpeed's FusedAdam/CPUAdam then use m and v as
// they are: p -= lr m / (sqrt(v) + eps)); torch's fused kernels always correct,
// so that case runs as plain ATen ops (same contract). No amsgrad.
#include <optional>

#include <ATen/core/Tensor.h>

#include "stratum/config/sections.h"

namespace stratum::optim {

struct AdamState {
  at::Tensor exp_avg;     // fp32, like the params
  at::Tensor exp_avg_sq;  // fp32, like the params
  at::Tensor step;        // 0-dim fp32 on the params' device: applied steps so far
};

// Zero moments and step 0, on the params' device.
AdamState make_adam_state(const at::Tensor& params_fp32);

// One Adam step in place on `params_fp32` (and `state`).
//   lr:            this step's lr (LrScheduler::lr()).
//   beta1_override: LrScheduler::beta1() (OneCycle's cycled momentum), else the config's beta1.
//   grad_scale:    the kernel uses grads / grad_scale and writes that unscaled
//                  gradient back into `grads_fp32` (fp16 loss scale, possibly
//                  folded with clipping: loss_scale / clip_coefficient).
//   found_inf:     optional 1-element fp32 tensor on the params' device; when it
//                  holds 1 the kernel changes nothing (step count included),
//                  without a host sync.
// Throws stratum::Error when the tensors are not fp32, of equal size, on one device.
void adam_step(at::Tensor& params_fp32, const at::Tensor& grads_fp32, AdamState& state,
               const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
               double grad_scale = 1.0, const std::optional<at::Tensor>& found_inf = std::nullopt);
// The same with grad_scale a 0-dim fp32 tensor on the params' device (computed
// there: the engine's clip coefficient needs no host sync).
void adam_step(at::Tensor& params_fp32, const at::Tensor& grads_fp32, AdamState& state,
               const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
               const at::Tensor& grad_scale, const std::optional<at::Tensor>& found_inf = std::nullopt);

// Mixed precision in one pass (CUDA builds with the kernel, tensors on a GPU:
// see mixed_adam_available): reads `grads` in the model's dtype (bf16, fp16 or
// fp32) without widening them, updates the fp32 master and moments, and when
// `params16` is defined writes the master rounded to its dtype there. The
// gradient is left as it was (torch's fused Adam writes back the unscaled one).
// Same math as adam_step to fp32 rounding.
void adam_step_mixed(at::Tensor& master, const at::Tensor& grads, AdamState& state,
                     const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
                     const at::Tensor& grad_scale, const at::Tensor& params16);
// Whether adam_step_mixed can run on `device` in this build.
bool mixed_adam_available(c10::Device device);

// Whether this config decays weights decoupled (AdamW) rather than as L2.
bool decoupled_weight_decay(const config::OptimizerConfig& optimizer);

}  // namespace stratum::optim
