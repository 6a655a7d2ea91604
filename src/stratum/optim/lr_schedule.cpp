#include "stratum/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>

namespace stratum::optim {

// --- WarmupLR -------------------------------------------------------------------

WarmupLR::WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps, config::WarmupType type)
    : min_lr_(min_lr), max_lr_(max_lr), warmup_num_steps_(std::max<int64_t>(2, warmup_num_steps)), type_(type) {}

WarmupLR::WarmupLR(const config::WarmupLRParams& p, double optimizer_lr)
    : WarmupLR(p.warmup_min_lr, p.warmup_max_lr.value_or(optimizer_lr), p.warmup_num_steps, p.warmup_type) {}

std::optional<double> WarmupLR::warmup_gamma(int64_t iteration) const {
  if (iteration >= warmup_num_steps_) return std::nullopt;
  const auto i = static_cast<double>(iteration);
  const auto w = static_cast<double>(warmup_num_steps_);
  if (type_ == config::WarmupType::log) return (1.0 / std::log(w)) * std::log(i + 1.0);
  return i / w;
}

double WarmupLR::lr_at(int64_t iteration) const {
  if (iteration < 0) return min_lr_;  // not started
  const double gamma = warmup_gamma(iteration).value_or(post_warmup_gamma(iteration));
  return min_lr_ + (max_lr_ - min_lr_) * gamma;
}

// --- WarmupDecayLR ----------------------------------------------------------------

WarmupDecayLR::WarmupDecayLR(const config::WarmupDecayLRParams& p)
    : WarmupLR(p.warmup_min_lr, p.warmup_max_lr, p.warmup_num_steps, p.warmup_type),
      total_num_steps_(p.total_num_steps) {}

double WarmupDecayLR::post_warmup_gamma(int64_t iteration) const {
  const double remaining = static_cast<double>(total_num_steps_ - iteration);
  const double span = std::max(1.0, static_cast<double>(total_num_steps_ - warmup_num_steps_));
  return std::max(0.0, remaining / span);
}

// --- WarmupCosineLR ---------------------------------------------------------------

WarmupCosineLR::WarmupCosineLR(const config::WarmupCosineLRParams& p, double optimizer_lr)
    : p_(p), base_lr_(optimizer_lr) {
  p_.warmup_num_steps = std::max<int64_t>(2, p.warmup_num_steps);
}

double WarmupCosineLR::ratio_at(int64_t iteration) const {
  if (iteration < 0) return 0.0;  // not started: DeepSpeed sets lr 0
  const auto i = static_cast<double>(iteration);
  const auto w = static_cast<double>(p_.warmup_num_steps);
  if (iteration < p_.warmup_num_steps) {
    const double gamma = p_.warmup_type == config::WarmupType::log ? (1.0 / std::log(w)) * std::log(i + 1.0) : i / w;
    return p_.warmup_min_ratio + gamma * (1.0 - p_.warmup_min_ratio);
  }
  const double done = static_cast<double>(iteration - p_.warmup_num_steps + 1);
  const double span = static_cast<double>(std::max<int64_t>(1, p_.total_num_steps - p_.warmup_num_steps));
  const double progress = std::min(1.0, done / span);  // stays at the floor past the end
  const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
  return std::max(0.0, p_.cos_min_ratio + (1.0 - p_.cos_min_ratio) * cosine);
}

double WarmupCosineLR::lr_at(int64_t iteration) const { return base_lr_ * ratio_at(iteration); }

// --- OneCycle ---------------------------------------------------------------------

OneCycle::OneCycle(const config::OneCycleParams& p)
    : p_(p),
      first_(static_cast<double>(p.cycle_first_step_size)),
      second_(static_cast<double>(p.cycle_second_step_size.value_or(p.cycle_first_step_size))),
      total_(first_ + second_),
      second_stairs_(p.cycle_second_stair_count.value_or(p.cycle_first_stair_count)),
      decay_lr_(p.decay_step_size != 0 && p.decay_lr_rate != 0.0),
      decay_mom_(p.decay_step_size != 0 && p.decay_mom_rate != 0.0) {}

// The arithmetic follows DeepSpeed's operation order so results match bit for bit.
double OneCycle::scale_factor(int64_t iteration) const {
  const double b = static_cast<double>(iteration + 1);
  const double step_ratio = first_ / total_;
  const double cycle = std::floor(1.0 + b / total_);
  const double x = 1.0 + b / total_ - cycle;
  double scale;
  int64_t stairs;
  if (x <= step_ratio) {
    scale = x / step_ratio;
    stairs = p_.cycle_first_stair_count;
  } else {
    scale = (x - 1.0) / (step_ratio - 1.0);
    stairs = second_stairs_;
  }
  if (stairs > 0) {
    const double in_cycle = std::fmod(b, total_);
    const double position = in_cycle <= first_ ? in_cycle * static_cast<double>(stairs) / first_
                                               : (total_ - in_cycle) * static_cast<double>(stairs) / second_;
    scale = std::floor(position) / static_cast<double>(stairs);
  }
  return scale;
}

double OneCycle::decay_interval(int64_t iteration) const {
  const double d = static_cast<double>(iteration) - total_ + 1.0;
  return d / static_cast<double>(p_.decay_step_size);
}

double OneCycle::lr_at(int64_t iteration) const {
  if (iteration < 0) return p_.cycle_min_lr;  // not started
  if (static_cast<double>(iteration) < total_)
    return p_.cycle_min_lr + (p_.cycle_max_lr - p_.cycle_min_lr) * scale_factor(iteration);
  if (!decay_lr_) return p_.cycle_min_lr;
  return p_.cycle_min_lr / (1.0 + p_.decay_lr_rate * decay_interval(iteration));
}

std::optional<double> OneCycle::beta1_at(int64_t iteration) const {
  if (!p_.cycle_momentum) return std::nullopt;
  if (iteration < 0) return p_.cycle_min_mom;  // DeepSpeed's constructor sets the min
  if (static_cast<double>(iteration) < total_)
    return p_.cycle_max_mom - (p_.cycle_max_mom - p_.cycle_min_mom) * scale_factor(iteration);
  if (!decay_mom_) return p_.cycle_max_mom;
  return p_.cycle_max_mom * (1.0 + p_.decay_mom_rate * decay_interval(iteration));
}

// --- factory and stateful wrapper -------------------------------------------------

std::unique_ptr<LrSchedule> make_lr_schedule(const std::optional<config::SchedulerConfig>& scheduler,
                                             double optimizer_lr) {
  if (!scheduler) return std::make_unique<ConstantLR>(optimizer_lr);
  return std::visit(
      [&](const auto& p) -> std::unique_ptr<LrSchedule> {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, config::WarmupLRParams>)
          return std::make_unique<WarmupLR>(p, optimizer_lr);
        else if constexpr (std::is_same_v<P, config::WarmupDecayLRParams>)
          return std::make_unique<WarmupDecayLR>(p);
        else if constexpr (std::is_same_v<P, config::WarmupCosineLRParams>)
          return std::make_unique<WarmupCosineLR>(p, optimizer_lr);
        else
          return std::make_unique<OneCycle>(p);
      },
      *scheduler);
}

int64_t initial_last_batch_iteration(const std::optional<config::SchedulerConfig>& scheduler) {
  if (!scheduler) return -1;
  return std::visit([](const auto& p) { return p.last_batch_iteration; }, *scheduler);
}

LrScheduler::LrScheduler(std::unique_ptr<LrSchedule> schedule, int64_t last_batch_iteration)
    : schedule_(std::move(schedule)), last_batch_iteration_(last_batch_iteration) {}

LrScheduler::LrScheduler(const std::optional<config::SchedulerConfig>& scheduler, double optimizer_lr)
    : LrScheduler(make_lr_schedule(scheduler, optimizer_lr), initial_last_batch_iteration(scheduler)) {}

}  // namespace stratum::optim
