#pragma once
// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), as
// DeepSpeed's FusedLamb computes it, over the flat fp32 segments a ZeRO rank
// owns. Per parameter tensor:
//   g  = grad / grad_scale
//   m  = b1 m + (1 - b1) g                 v = b2 v + (1 - b2) g g
//   m^ = m / (1 - b1^step)                 v^ = v / (1 - b2^step)   (bias_correction; else m, v)
//   u  = m^ / (sqrt(v^) + eps) + wd p
//   r  = clamp(||p|| / ||u||, min_coeff, max_coeff), or 1 when either norm is 0
//   p -= lr r u
// The trust ratio r belongs to a whole parameter while a segment holds runs of
// parameters (ZeRO cuts flat buckets across parameter boundaries and ranks), so
// a step is three calls: lamb_moments on every segment (moments, and this
// rank's part of each parameter's ||p||^2 and ||u||^2), then the caller sums
// those partial norms over the ranks that hold the other parts (one small
// all-reduce), lamb_trust_ratios, and lamb_update on every segment. u is
// computed again in lamb_update from the moments and params (the same
// operations on the same values), so no state beyond Adam's is kept: Lamb's
// states are Adam's (exp_avg, exp_avg_sq, step) and checkpoint the same way.
// Elements of a segment in no run (bucket padding) are never read or written.
//
// These are ATen ops (foreach where they fit), on the CPU or a GPU alike, with
// no host sync: the step count, the grad scale and the norms stay on the device.
// The host path of CPU offload is optim/cpu_lamb.h.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/config/sections.h"
#include "stratum/optim/adam.h"
#include "stratum/optim/param_run.h"

namespace stratum::optim {

// A segment's runs, checked (inside the segment, non-empty, ascending, not
// overlapping, parameters in [0, num_params)) and cut into pieces of at most
// `max_piece` elements, which the device path processes a group at a time (so
// its temporaries stay small), with each run's parameter index on `device`.
class LambRuns {
 public:
  static constexpr int64_t kMaxPiece = int64_t{1} << 24;
  LambRuns() = default;
  // Throws stratum::Error naming the first bad run.
  LambRuns(std::vector<ParamRun> runs, int64_t segment_numel, int64_t num_params, c10::Device device,
           int64_t max_piece = kMaxPiece);

  const std::vector<ParamRun>& runs() const { return runs_; }
  int64_t segment_numel() const { return segment_numel_; }
  int64_t num_params() const { return num_params_; }
  // [first, last) ranges of runs() of at most max_piece elements in all.
  const std::vector<std::pair<size_t, size_t>>& groups() const { return groups_; }
  // int64 [runs().size()] on the device: the parameter of each run.
  const at::Tensor& params_on_device() const { return param_ids_; }

 private:
  std::vector<ParamRun> runs_;
  std::vector<std::pair<size_t, size_t>> groups_;
  at::Tensor param_ids_;
  int64_t segment_numel_ = 0, num_params_ = 0;
};

// Zeros for the partial norms: fp32 [2, num_params] (row 0: sums of p^2, row 1:
// sums of u^2), on `device`.
at::Tensor lamb_norms_buffer(int64_t num_params, c10::Device device);

// Pass 1 on one segment: Adam's moments on the runs' elements (state.step
// counts this step: it is incremented here), and each run's sum of p^2 and u^2
// added into `sq_norms` (lamb_norms_buffer) at its parameter.
//   grads: fp32, bf16 or fp16, the segment's size, on the params' device; read only.
//   grad_scale: undefined or a 1-element fp32 tensor on the params' device: the
//     step uses grads / grad_scale (the engine's loss scale / clip coefficient).
//   found_inf: as in adam_step: when it holds 1, this and lamb_update change
//     nothing (the step count included).
void lamb_moments(const at::Tensor& params_fp32, const at::Tensor& grads, AdamState& state, const LambRuns& runs,
                  const config::OptimizerConfig& optimizer, std::optional<double> beta1_override,
                  const at::Tensor& grad_scale, at::Tensor& sq_norms,
                  const std::optional<at::Tensor>& found_inf = std::nullopt);

// r per parameter from the summed squared norms (lamb_norms_buffer's layout, any
// floating dtype): [num_params], that dtype, on their device.
at::Tensor lamb_trust_ratios(const at::Tensor& sq_norms, const config::OptimizerConfig& optimizer);

// Pass 2 on one segment, after lamb_moments: p -= lr r u on the runs' elements.
// params16, when defined (the segment's size, bf16/fp16/fp32, on the params'
// device), receives the updated params of the runs rounded to its dtype.
void lamb_update(at::Tensor& params_fp32, const AdamState& state, const LambRuns& runs,
                 const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
                 const at::Tensor& trust_ratios, const at::Tensor& params16 = at::Tensor(),
                 const std::optional<at::Tensor>& found_inf = std::nullopt);

// The whole step on one segment: lamb_moments, then `reduce_sq_norms` (when
// given) to sum the partial norms with the other holders of these parameters,
// lamb_trust_ratios, lamb_update.
void lamb_step(at::Tensor& params_fp32, const at::Tensor& grads, AdamState& state, const LambRuns& runs,
               const config::OptimizerConfig& optimizer, double lr, std::optional<double> beta1_override,
               const at::Tensor& grad_scale = at::Tensor(),
               const std::function<void(at::Tensor&)>& reduce_sq_norms = nullptr,
               const std::optional<at::Tensor>& found_inf = std::nullopt);

}  // namespace stratum::optim
