#pragma once
// fp16 loss scaling from the `fp16` section: a static scale (loss_scale > 0) or
// DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py, the one
// ZeRO stages 1-3 use), step for step:
//   - start at 2^initial_scale_power; factor 2; hysteresis H = `hysteresis`.
//   - overflow: the step is skipped. If H == 1 or the remaining hysteresis is 1,
//     the scale halves (never below min_loss_scale); otherwise only the remaining
//     hysteresis drops by one. Either way last_overflow_iter = cur_iter.
//   - clean step: with consecutive_hysteresis the remaining hysteresis refills to
//     H; the scale doubles when (cur_iter - last_overflow_iter - 1) is a positive
//     multiple of loss_scale_window (i.e. after every window of clean steps since
//     the last overflow), and without consecutive_hysteresis that refills it too.
//   - cur_iter counts every update (skipped or not).
// At the minimum scale DeepSpeed raises on the overflow that would lower it (the
// first one at the minimum unless hysteresis is left). Stratum raises a
// stratum::Error too, but only at the H-th consecutive overflow that finds the
// scale already at the minimum, so one odd overflow there does not end a run; a
// clean step resets that count. (With consecutive_hysteresis this is DeepSpeed's
// behaviour; without it DeepSpeed raises on the first.)
// With fp16 off the scaler is static at 1 (update still reports skips).
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/config/sections.h"

namespace stratum::optim {

// Everything needed to resume, as plain numbers (for checkpoints).
struct LossScalerState {
  double cur_scale = 1.0;
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;
  int64_t cur_hysteresis = 1;
  int64_t overflows_at_min = 0;  // consecutive overflows while at min_loss_scale
};

class LossScaler {
 public:
  // `log_messages`: write the one-line overflow messages (pass rank == 0 so a
  // job prints each once; the decision is the same on every rank).
  explicit LossScaler(const config::Fp16Config& fp16, bool log_messages = true);

  double scale() const { return state_.cur_scale; }
  bool dynamic() const { return dynamic_; }

  // Call once per optimizer boundary with the overflow flag reduced across all
  // ranks. Returns true when the step must be skipped (== overflow). Throws
  // stratum::Error at the minimum scale (see above).
  // update() may change scale() (down on overflow, up after a clean window):
  // read scale() BEFORE update() to unscale this step's gradients and norm; the
  // new scale is for the next backward.
  bool update(bool overflow);

  const LossScalerState& state() const { return state_; }
  void load_state(const LossScalerState& s) { state_ = s; }

 private:
  bool dynamic_;
  double min_scale_;
  int64_t window_;
  int64_t hysteresis_;  // DeepSpeed's delayed_shift
  bool consecutive_hysteresis_;
  bool log_messages_;
  LossScalerState state_;
};

// 1-element float tensor on the grads' device: 1 if any element of `grads` is
// inf or nan, else 0. No host sync, so the engine can all-reduce it (max) across
// ranks before deciding. Uses the max-abs (inf-norm) reduction, which is exact
// (unlike DeepSpeed's fp32 sum, it cannot overflow on large finite values) and
// propagates nan. Empty `grads`: a CPU zero.
at::Tensor local_overflow_flag(const std::vector<at::Tensor>& grads);

}  // namespace stratum::optim
