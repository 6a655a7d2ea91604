// LR schedules against DeepSpeed's formulas (lr_schedules.py), evaluated here by
// hand at chosen iterations, and the stateful wrapper's iteration bookkeeping.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "stratum/optim/lr_schedule.h"

using namespace stratum;
using namespace stratum::optim;
using config::WarmupType;

namespace {
constexpr double kTol = 1e-12;
const double kPi = std::numbers::pi;
}  // namespace

TEST(LrSchedule, ConstantWithoutSchedulerSection) {
  auto s = make_lr_schedule(std::nullopt, 3e-4);
  for (int64_t i : {-1, 0, 1, 1000}) EXPECT_EQ(s->lr_at(i), 3e-4);
  EXPECT_FALSE(s->beta1_at(0));
  EXPECT_STREQ(s->name(), "constant");
}

TEST(LrSchedule, WarmupLRLog) {
  config::WarmupLRParams p;
  p.warmup_min_lr = 0.01;
  p.warmup_max_lr = 0.1;
  p.warmup_num_steps = 10;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 1.0);
  EXPECT_STREQ(s->name(), "WarmupLR");
  EXPECT_NEAR(s->lr_at(-1), 0.01, kTol);  // not started: warmup_min_lr
  EXPECT_NEAR(s->lr_at(0), 0.01, kTol);   // log(1) = 0
  EXPECT_NEAR(s->lr_at(1), 0.01 + 0.09 * std::log(2.0) / std::log(10.0), kTol);
  EXPECT_NEAR(s->lr_at(5), 0.01 + 0.09 * std::log(6.0) / std::log(10.0), kTol);
  EXPECT_NEAR(s->lr_at(9), 0.1, kTol);  // log(10) / log(10)
  EXPECT_NEAR(s->lr_at(10), 0.1, kTol);
  EXPECT_NEAR(s->lr_at(100000), 0.1, kTol);
}

TEST(LrSchedule, WarmupLRLinearAndDefaultMaxIsOptimizerLr) {
  config::WarmupLRParams p;
  p.warmup_min_lr = 0.0;
  p.warmup_num_steps = 10;
  p.warmup_type = WarmupType::linear;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 0.2);  // warmup_max_lr unset: 0.2
  EXPECT_NEAR(s->lr_at(0), 0.0, kTol);
  EXPECT_NEAR(s->lr_at(1), 0.2 * 1 / 10, kTol);
  EXPECT_NEAR(s->lr_at(5), 0.2 * 5 / 10, kTol);
  EXPECT_NEAR(s->lr_at(9), 0.2 * 9 / 10, kTol);
  EXPECT_NEAR(s->lr_at(10), 0.2, kTol);
  EXPECT_NEAR(s->lr_at(11), 0.2, kTol);
}

TEST(LrSchedule, WarmupNumStepsIsAtLeastTwo) {
  config::WarmupLRParams p;
  p.warmup_max_lr = 1.0;
  p.warmup_num_steps = 1;
  p.warmup_type = WarmupType::linear;
  auto lin = make_lr_schedule(config::SchedulerConfig{p}, 1.0);
  EXPECT_NEAR(lin->lr_at(1), 0.5, kTol);  // 1 / max(2, 1)
  EXPECT_NEAR(lin->lr_at(2), 1.0, kTol);
  p.warmup_type = WarmupType::log;
  auto log = make_lr_schedule(config::SchedulerConfig{p}, 1.0);
  EXPECT_NEAR(log->lr_at(0), 0.0, kTol);
  EXPECT_NEAR(log->lr_at(1), 1.0, kTol);  // log(2) / log(2)
}

TEST(LrSchedule, WarmupDecayLR) {
  config::WarmupDecayLRParams p;
  p.total_num_steps = 100;
  p.warmup_min_lr = 0.01;
  p.warmup_max_lr = 0.1;
  p.warmup_num_steps = 10;
  p.warmup_type = WarmupType::linear;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 123.0);  // the optimizer lr plays no part
  EXPECT_STREQ(s->name(), "WarmupDecayLR");
  EXPECT_NEAR(s->lr_at(-1), 0.01, kTol);
  EXPECT_NEAR(s->lr_at(0), 0.01, kTol);
  EXPECT_NEAR(s->lr_at(5), 0.01 + 0.09 * 5 / 10, kTol);
  EXPECT_NEAR(s->lr_at(9), 0.01 + 0.09 * 9 / 10, kTol);
  EXPECT_NEAR(s->lr_at(10), 0.1, kTol);                      // (100 - 10) / (100 - 10)
  EXPECT_NEAR(s->lr_at(55), 0.01 + 0.09 * 45.0 / 90.0, kTol);  // mid-decay
  EXPECT_NEAR(s->lr_at(99), 0.01 + 0.09 * 1.0 / 90.0, kTol);
  EXPECT_NEAR(s->lr_at(100), 0.01, kTol);  // end
  EXPECT_NEAR(s->lr_at(150), 0.01, kTol);  // past the end: gamma clamped at 0
}

TEST(LrSchedule, WarmupDecayLRDefaultMaxIsNotOptimizerLr) {
  config::WarmupDecayLRParams p;  // warmup_max_lr 0.001 by default, as DeepSpeed
  p.total_num_steps = 2000;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 0.5);
  EXPECT_NEAR(s->lr_at(1000), 0.001, kTol);
  EXPECT_NEAR(s->lr_at(500), 0.001 * std::log(501.0) / std::log(1000.0), kTol);
}

TEST(LrSchedule, WarmupCosineLRLinear) {
  config::WarmupCosineLRParams p;
  p.total_num_steps = 110;
  p.warmup_min_ratio = 0.1;
  p.warmup_num_steps = 10;
  p.cos_min_ratio = 0.01;
  p.warmup_type = WarmupType::linear;
  const double base = 0.5;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, base);
  EXPECT_STREQ(s->name(), "WarmupCosineLR");
  EXPECT_EQ(s->lr_at(-1), 0.0);  // DeepSpeed sets 0 before the first scheduler step
  EXPECT_NEAR(s->lr_at(0), base * 0.1, kTol);
  EXPECT_NEAR(s->lr_at(5), base * (0.1 + 0.5 * 0.9), kTol);
  EXPECT_NEAR(s->lr_at(9), base * (0.1 + 0.9 * 0.9), kTol);
  // Decay: progress = (i - 10 + 1) / (110 - 10).
  EXPECT_NEAR(s->lr_at(10), base * (0.01 + 0.99 * (1 + std::cos(kPi * 0.01)) / 2), kTol);
  EXPECT_NEAR(s->lr_at(59), base * (0.01 + 0.99 * 0.5), kTol);
  EXPECT_NEAR(s->lr_at(84), base * (0.01 + 0.99 * (1 + std::cos(kPi * 0.75)) / 2), kTol);
  EXPECT_NEAR(s->lr_at(109), base * 0.01, kTol);  // end
  EXPECT_NEAR(s->lr_at(110), base * 0.01, kTol);
  EXPECT_NEAR(s->lr_at(10000), base * 0.01, kTol);  // past the end: stays at the floor
}

TEST(LrSchedule, WarmupCosineLRLogWarmup) {
  config::WarmupCosineLRParams p;
  p.total_num_steps = 1000;
  p.warmup_min_ratio = 0.0;
  p.warmup_num_steps = 100;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 2.0);
  EXPECT_NEAR(s->lr_at(0), 0.0, kTol);
  EXPECT_NEAR(s->lr_at(49), 2.0 * std::log(50.0) / std::log(100.0), kTol);
  EXPECT_NEAR(s->lr_at(99), 2.0, kTol);
}

TEST(LrSchedule, OneCycleUpDownDecayAndMomentum) {
  config::OneCycleParams p;
  p.cycle_min_lr = 0.001;
  p.cycle_max_lr = 0.01;
  p.cycle_first_step_size = 10;
  p.cycle_second_step_size = 20;  // cycle = 30 batches
  p.decay_lr_rate = 0.5;
  p.decay_step_size = 5;
  p.cycle_min_mom = 0.85;
  p.cycle_max_mom = 0.95;
  p.decay_mom_rate = 0.01;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 1.0);
  EXPECT_STREQ(s->name(), "OneCycle");
  // Before the first step: min lr, and (DeepSpeed's constructor) min momentum.
  EXPECT_NEAR(s->lr_at(-1), 0.001, kTol);
  EXPECT_NEAR(*s->beta1_at(-1), 0.85, kTol);
  // Batch b = i + 1; up over b in [0, 10]: scale b / 10.
  EXPECT_NEAR(s->lr_at(0), 0.001 + 0.009 * 0.1, kTol);
  EXPECT_NEAR(*s->beta1_at(0), 0.95 - 0.1 * 0.1, kTol);
  EXPECT_NEAR(s->lr_at(4), 0.001 + 0.009 * 0.5, kTol);
  EXPECT_NEAR(*s->beta1_at(4), 0.90, kTol);
  EXPECT_NEAR(s->lr_at(9), 0.01, kTol);  // the peak
  EXPECT_NEAR(*s->beta1_at(9), 0.85, kTol);
  // Down over b in [10, 30]: scale (30 - b) / 20.
  EXPECT_NEAR(s->lr_at(19), 0.001 + 0.009 * 0.5, kTol);
  EXPECT_NEAR(*s->beta1_at(19), 0.90, kTol);
  EXPECT_NEAR(s->lr_at(28), 0.001 + 0.009 * 0.05, kTol);
  EXPECT_NEAR(s->lr_at(29), 0.001, kTol);  // b = 30: the cycle's end
  EXPECT_NEAR(*s->beta1_at(29), 0.95, kTol);
  // Decay from i = 30, d = i - 30 + 1: lr = min / (1 + rate d / 5), mom = max (1 + rate d / 5).
  EXPECT_NEAR(s->lr_at(30), 0.001 / (1 + 0.5 * 1 / 5.0), kTol);
  EXPECT_NEAR(*s->beta1_at(30), 0.95 * (1 + 0.01 * 1 / 5.0), kTol);
  EXPECT_NEAR(s->lr_at(39), 0.001 / (1 + 0.5 * 10 / 5.0), kTol);
  EXPECT_NEAR(*s->beta1_at(39), 0.95 * (1 + 0.01 * 10 / 5.0), kTol);
}

TEST(LrSchedule, OneCycleSecondStepSizeDefaultsToFirstAndNoDecay) {
  config::OneCycleParams p;
  p.cycle_min_lr = 0.0;
  p.cycle_max_lr = 1.0;
  p.cycle_first_step_size = 10;  // second: 10 too, cycle = 20
  p.cycle_momentum = false;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 1.0);
  EXPECT_NEAR(s->lr_at(4), 0.5, kTol);
  EXPECT_NEAR(s->lr_at(14), 0.5, kTol);  // b = 15: (20 - 15) / 10
  EXPECT_NEAR(s->lr_at(18), 0.1, kTol);
  EXPECT_NEAR(s->lr_at(19), 0.0, kTol);
  EXPECT_NEAR(s->lr_at(20), 0.0, kTol);  // decay_step_size 0: no decay, min lr
  EXPECT_NEAR(s->lr_at(500), 0.0, kTol);
  EXPECT_FALSE(s->beta1_at(5));  // cycle_momentum off
}

TEST(LrSchedule, OneCycleStaircase) {
  config::OneCycleParams p;
  p.cycle_min_lr = 0.0;
  p.cycle_max_lr = 1.0;
  p.cycle_first_step_size = 10;
  p.cycle_second_step_size = 20;
  p.cycle_first_stair_count = 4;  // second: 4 too
  p.cycle_min_mom = 0.8;
  p.cycle_max_mom = 0.9;
  auto s = make_lr_schedule(config::SchedulerConfig{p}, 1.0);
  // Up: position b * 4 / 10, floored, / 4.
  EXPECT_NEAR(s->lr_at(1), 0.0, kTol);   // b = 2: 0.8
  EXPECT_NEAR(s->lr_at(2), 0.25, kTol);  // b = 3: 1.2
  EXPECT_NEAR(s->lr_at(4), 0.5, kTol);   // b = 5: 2.0
  EXPECT_NEAR(s->lr_at(6), 0.5, kTol);   // b = 7: 2.8
  EXPECT_NEAR(s->lr_at(7), 0.75, kTol);  // b = 8: 3.2
  EXPECT_NEAR(*s->beta1_at(7), 0.9 - 0.1 * 0.75, kTol);
  // Down: position (30 - b) * 4 / 20.
  EXPECT_NEAR(s->lr_at(19), 0.5, kTol);   // b = 20: 2.0
  EXPECT_NEAR(s->lr_at(23), 0.25, kTol);  // b = 24: 1.2
  EXPECT_NEAR(s->lr_at(24), 0.25, kTol);  // b = 25: 1.0
  EXPECT_NEAR(s->lr_at(25), 0.0, kTol);   // b = 26: 0.8
}

// The first optimizer step runs with the "not started" lr, each applied step
// advances one iteration, a skipped step does not.
TEST(LrScheduler, IterationBookkeepingAndSkippedSteps) {
  config::WarmupLRParams p;
  p.warmup_min_lr = 0.0;
  p.warmup_max_lr = 1.0;
  p.warmup_num_steps = 10;
  p.warmup_type = WarmupType::linear;
  LrScheduler sched(config::SchedulerConfig{p}, 1.0);
  EXPECT_EQ(sched.last_batch_iteration(), -1);

  const bool overflow[] = {false, false, true, true, false, false};
  const double expected_lr[] = {0.0, 0.0, 0.1, 0.1, 0.1, 0.2};  // lr_at(k - 1) for the k-th applied step
  const int64_t expected_iteration_after[] = {0, 1, 1, 1, 2, 3};
  for (int attempt = 0; attempt < 6; ++attempt) {
    EXPECT_NEAR(sched.lr(), expected_lr[attempt], kTol) << "attempt " << attempt;
    if (!overflow[attempt]) sched.step();
    EXPECT_EQ(sched.last_batch_iteration(), expected_iteration_after[attempt]);
  }

  // Checkpoint: one number restores the schedule's position.
  LrScheduler resumed(config::SchedulerConfig{p}, 1.0);
  resumed.load_last_batch_iteration(sched.last_batch_iteration());
  EXPECT_NEAR(resumed.lr(), 0.3, kTol);
}

TEST(LrScheduler, ConfigLastBatchIterationAndOneCycleBeta1) {
  config::OneCycleParams p;
  p.cycle_min_lr = 0.0;
  p.cycle_max_lr = 1.0;
  p.cycle_first_step_size = 10;
  p.last_batch_iteration = 4;
  LrScheduler sched(config::SchedulerConfig{p}, 1.0);
  EXPECT_EQ(sched.last_batch_iteration(), 4);
  EXPECT_NEAR(sched.lr(), 0.5, kTol);
  EXPECT_NEAR(*sched.beta1(), 0.9 - 0.1 * 0.5, kTol);

  LrScheduler constant(std::nullopt, 0.25);
  EXPECT_EQ(constant.last_batch_iteration(), -1);
  EXPECT_EQ(constant.lr(), 0.25);
  EXPECT_FALSE(constant.beta1());
}
