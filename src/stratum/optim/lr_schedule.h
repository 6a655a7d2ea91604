#pragma once
// Learning-rate schedules of the DeepSpeed `scheduler` section, with DeepSpeed's
// formulas and parameter names (deepspeed/runtime/lr_schedules.py), and the
// stateful LrScheduler that counts iterations as DeepSpeed's engine does.
//
// Which lr an optimizer step uses (DeepSpeed since v0.15.3, verified in
// lr_schedules.py and engine.py `_take_model_step`):
//   - A schedule object starts at `last_batch_iteration` = -1 (the config's
//     `last_batch_iteration`) and sets the "not started" lr: WarmupLR and
//     WarmupDecayLR warmup_min_lr, WarmupCosineLR 0, OneCycle cycle_min_lr (and
//     beta1 = cycle_min_mom).
//   - The engine calls `lr_scheduler.step()` (last_batch_iteration += 1) after
//     every optimizer step that was applied, never after one skipped for an fp16
//     overflow.
//   So optimizer step k (k = applied steps before it, counting from 0) runs with
//   lr_at(k - 1): step 0 with lr_at(-1), step 1 with lr_at(0), and so on; the
//   warmup therefore starts one step late, exactly as in DeepSpeed. A skipped step
//   leaves the iteration where it was, and the retry uses the same lr.
#include <cstdint>
#include <memory>
#include <optional>

#include "stratum/config/sections.h"

namespace stratum::optim {

// lr (and optionally Adam's beta1) as a pure function of DeepSpeed's
// `last_batch_iteration` (-1 before the first scheduler step; any negative
// value means "not started").
class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr_at(int64_t iteration) const = 0;
  // OneCycle with cycle_momentum cycles Adam's beta1; everyone else: nullopt
  // (use the optimizer's beta1).
  virtual std::optional<double> beta1_at(int64_t /*iteration*/) const { return std::nullopt; }
  virtual const char* name() const = 0;
};

// No `scheduler` section: the optimizer's lr, always.
class ConstantLR final : public LrSchedule {
 public:
  explicit ConstantLR(double lr) : lr_(lr) {}
  double lr_at(int64_t) const override { return lr_; }
  const char* name() const override { return "constant"; }

 private:
  double lr_;
};

// warmup_min_lr -> warmup_max_lr (unset: the optimizer's lr) over
// W = max(2, warmup_num_steps) iterations, then flat:
//   gamma(i) = log(i + 1) / log(W)  (log)   or   i / W  (linear)   for 0 <= i < W
//   lr(i) = min + (max - min) * gamma(i),  gamma = 1 from i = W on.
class WarmupLR : public LrSchedule {
 public:
  WarmupLR(const config::WarmupLRParams& p, double optimizer_lr);
  double lr_at(int64_t iteration) const override;
  const char* name() const override { return "WarmupLR"; }

 protected:
  WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps, config::WarmupType type);
  // gamma(i) during warmup (i < W); nullopt once warmup is over.
  std::optional<double> warmup_gamma(int64_t iteration) const;
  virtual double post_warmup_gamma(int64_t /*iteration*/) const { return 1.0; }
  double min_lr_, max_lr_;
  int64_t warmup_num_steps_;  // W = max(2, warmup_num_steps), as DeepSpeed clamps it
  config::WarmupType type_;
};

// WarmupLR's warmup (warmup_max_lr defaults to 0.001, not the optimizer's lr),
// then linear decay to warmup_min_lr at total_num_steps T, flat after:
//   gamma(i) = max(0, (T - i) / max(1, T - W))   for i >= W.
class WarmupDecayLR final : public WarmupLR {
 public:
  explicit WarmupDecayLR(const config::WarmupDecayLRParams& p);
  const char* name() const override { return "WarmupDecayLR"; }

 private:
  double post_warmup_gamma(int64_t iteration) const override;
  int64_t total_num_steps_;
};

// A ratio of the optimizer's lr: warmup_min_ratio -> 1 over W = max(2, n)
// iterations (log or linear as WarmupLR), then a half cosine down to
// cos_min_ratio at T:
//   warmup:  r(i) = wmr + (1 - wmr) * gamma(i)
//   decay:   p = min(1, (i - W + 1) / max(1, T - W)),
//            r(i) = max(0, cmr + (1 - cmr) * (1 + cos(pi p)) / 2)
// Before the first scheduler step DeepSpeed sets lr 0 (not wmr x lr).
class WarmupCosineLR final : public LrSchedule {
 public:
  WarmupCosineLR(const config::WarmupCosineLRParams& p, double optimizer_lr);
  double lr_at(int64_t iteration) const override;
  double ratio_at(int64_t iteration) const;
  const char* name() const override { return "WarmupCosineLR"; }

 private:
  config::WarmupCosineLRParams p_;  // warmup_num_steps already max(2, n)
  double base_lr_;
};

// One triangular cycle cycle_min_lr -> cycle_max_lr (cycle_first_step_size
// iterations up) -> cycle_min_lr (cycle_second_step_size down, default: the
// first), then decay. With b = i + 1 and S = first + second:
//   x = b / S - floor(b / S);  up while x <= first / S: s = x S / first,
//   else s = (1 - x) S / second;  with stairs c > 0 for that half, s is
//   floor(position c) / c instead (position along the half, 0..1).
//   lr = min + (max - min) s;  beta1 = max_mom - (max_mom - min_mom) s.
// From i >= S (decay, d = i - S + 1): lr = min / (1 + decay_lr_rate d / decay_step_size),
// beta1 = max_mom (1 + decay_mom_rate d / decay_step_size); a zero rate or a zero
// decay_step_size means no decay (lr = min, beta1 = max_mom).
// DeepSpeed quirks kept: before the first step beta1 is cycle_min_mom although the
// cycle formula at b = 0 gives cycle_max_mom; momentum decay multiplies (grows).
// Deliberate difference: DeepSpeed also forces Adam's beta2 to 0.99 whenever it
// cycles momentum; Stratum keeps the configured beta2.
class OneCycle final : public LrSchedule {
 public:
  explicit OneCycle(const config::OneCycleParams& p);
  double lr_at(int64_t iteration) const override;
  std::optional<double> beta1_at(int64_t iteration) const override;
  const char* name() const override { return "OneCycle"; }
  // The cycle's position s in [0, 1] at batch index b = iteration + 1.
  double scale_factor(int64_t iteration) const;

 private:
  double decay_interval(int64_t iteration) const;  // d / decay_step_size
  config::OneCycleParams p_;
  double first_, second_, total_;
  int64_t second_stairs_;
  bool decay_lr_, decay_mom_;
};

// The schedule for a `scheduler` section; nullopt: ConstantLR(optimizer_lr).
// `optimizer_lr` is the optimizer's lr (WarmupLR's default max, WarmupCosineLR's base).
std::unique_ptr<LrSchedule> make_lr_schedule(const std::optional<config::SchedulerConfig>& scheduler,
                                             double optimizer_lr);
// The config's `last_batch_iteration` (-1 when no scheduler).
int64_t initial_last_batch_iteration(const std::optional<config::SchedulerConfig>& scheduler);

// DeepSpeed's `last_batch_iteration` bookkeeping around a schedule (see the top
// of this file). Per optimizer boundary:
//   lr = scheduler.lr(); beta1 = scheduler.beta1();   // for this step
//   if (!skipped) scheduler.step();
class LrScheduler {
 public:
  explicit LrScheduler(std::unique_ptr<LrSchedule> schedule, int64_t last_batch_iteration = -1);
  // From the config sections (make_lr_schedule + the config's last_batch_iteration).
  LrScheduler(const std::optional<config::SchedulerConfig>& scheduler, double optimizer_lr);

  double lr() const { return schedule_->lr_at(last_batch_iteration_); }
  std::optional<double> beta1() const { return schedule_->beta1_at(last_batch_iteration_); }
  // After an applied optimizer step only.
  void step() { ++last_batch_iteration_; }

  // Checkpoint state: DeepSpeed's `{'last_batch_iteration': n}`, the same number.
  int64_t last_batch_iteration() const { return last_batch_iteration_; }
  void load_last_batch_iteration(int64_t n) { last_batch_iteration_ = n; }
  const LrSchedule& schedule() const { return *schedule_; }

 private:
  std::unique_ptr<LrSchedule> schedule_;
  int64_t last_batch_iteration_;
};

}  // namespace stratum::optim
