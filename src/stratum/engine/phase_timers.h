#pragma once
// Wall-clock timers of the engine's phases, DeepSpeed's wall_clock_breakdown:
// forward, backward in its two parts (bwd_inner: autograd's backward pass;
// bwd_allreduce: what the engine then does for the gradient reduction — the
// strategy's finish_backward, and at the accumulation boundary the wait for
// every reduction in flight, which Stratum runs at the top of step() and
// counts here as backward, as DeepSpeed's allreduce_gradients is), and the
// optimizer step. bwd is bwd_inner + bwd_allreduce.
//
// Each timed phase is bracketed by a device synchronize, so a time is the
// device's work for the phase rather than the host's queueing (old DeepSpeed
// timers synchronized the same way; current ones record CUDA events). A timed
// run is therefore slower than an untimed one. On the CPU nothing is queued:
// no synchronize is needed.
//
// The engine owns one (engine_core.h) when wall_clock_breakdown is on or the
// flops profiler needs the latencies of its step; the profiler reads the
// totals of the step in progress (step_seconds).
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace stratum {

enum class Phase { fwd = 0, bwd_inner = 1, bwd_allreduce = 2, step = 3 };

class PhaseTimers {
 public:
  explicit PhaseTimers(c10::Device device) : device_(device) {}

  // Synchronizes the device, then starts (stops) the clock of `p`. A phase
  // started twice without a stop keeps its first start; a stop without a
  // start is ignored (an aborted phase never adds time).
  void start(Phase p);
  void stop(Phase p);
  // Drops a started phase without adding its time (a forward that threw).
  void cancel(Phase p) { running_[index(p)] = false; }

  // One micro-step (one engine.step() call) is over.
  void end_micro_step() { ++interval_micro_steps_; }
  // An optimizer step is over: its totals go to the interval's.
  void end_step();
  // Forgets the step in progress (and nothing of the interval).
  void reset_step() { step_.fill(0.0); }

  // Seconds `p` took in the optimizer step in progress (since the last end_step).
  double step_seconds(Phase p) const { return step_[index(p)]; }
  double step_bwd_seconds() const { return step_seconds(Phase::bwd_inner) + step_seconds(Phase::bwd_allreduce); }
  int64_t interval_steps() const { return interval_steps_; }

  // DeepSpeed's two lines for the interval since the last report (times in ms):
  //   time (ms) | fwd_microstep: a | bwd_microstep: b | bwd_inner_microstep: c | bwd_allreduce_microstep: d | step_microstep: e
  //   time (ms) | fwd: A | bwd: B | bwd_inner: C | bwd_allreduce: D | step: E
  // The first averaged over the interval's micro-steps, the second over its
  // optimizer steps. Then starts a new interval. Empty before any step.
  std::vector<std::string> report();

 private:
  static size_t index(Phase p) { return static_cast<size_t>(p); }
  void synchronize() const;

  c10::Device device_;
  std::array<std::chrono::steady_clock::time_point, 4> started_{};
  std::array<bool, 4> running_{};
  std::array<double, 4> step_{};      // seconds, the optimizer step in progress
  std::array<double, 4> interval_{};  // seconds, the steps since the last report
  int64_t interval_micro_steps_ = 0, interval_steps_ = 0;
};

}  // namespace stratum
