#include "stratum/engine/phase_timers.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdio>

namespace stratum {

void PhaseTimers::synchronize() const {
  if (device_.type() == c10::kCPU) return;  // CPU ops run as they are called
  c10::impl::getDeviceGuardImpl(device_.type())->synchronizeDevice(device_.index());
}

void PhaseTimers::start(Phase p) {
  if (running_[index(p)]) return;
  synchronize();
  started_[index(p)] = std::chrono::steady_clock::now();
  running_[index(p)] = true;
}

void PhaseTimers::stop(Phase p) {
  if (!running_[index(p)]) return;
  synchronize();
  step_[index(p)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - started_[index(p)]).count();
  running_[index(p)] = false;
}

void PhaseTimers::end_step() {
  for (size_t i = 0; i < step_.size(); ++i) interval_[i] += step_[i];
  step_.fill(0.0);
  ++interval_steps_;
}

std::vector<std::string> PhaseTimers::report() {
  if (interval_steps_ == 0 || interval_micro_steps_ == 0) return {};
  const auto line = [&](double per, const char* suffix) {
    const double fwd = interval_[index(Phase::fwd)], inner = interval_[index(Phase::bwd_inner)],
                 reduce = interval_[index(Phase::bwd_allreduce)], step = interval_[index(Phase::step)];
    const double ms = 1000.0 / per;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "time (ms) | fwd%s: %.2f | bwd%s: %.2f | bwd_inner%s: %.2f | bwd_allreduce%s: %.2f | step%s: %.2f",
                  suffix, fwd * ms, suffix, (inner + reduce) * ms, suffix, inner * ms, suffix, reduce * ms, suffix,
                  step * ms);
    return std::string(buf);
  };
  std::vector<std::string> out{line(static_cast<double>(interval_micro_steps_), "_microstep"),
                               line(static_cast<double>(interval_steps_), "")};
  interval_.fill(0.0);
  interval_micro_steps_ = interval_steps_ = 0;
  return out;
}

}  // namespace stratum
