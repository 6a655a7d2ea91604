// LossScaler on injected overflow sequences, against DeepSpeed's DynamicLossScaler
// rules (see loss_scaler.h), and the overflow flag.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include <torch/torch.h>

#include "stratum/core/error.h"
#include "stratum/optim/loss_scaler.h"

using namespace stratum;
using namespace stratum::optim;

namespace {

config::Fp16Config dynamic_fp16(int64_t power, int64_t window, int64_t hysteresis, double min_scale = 1.0,
                                bool consecutive = false) {
  config::Fp16Config f;
  f.enabled = true;
  f.initial_scale_power = power;
  f.loss_scale_window = window;
  f.hysteresis = hysteresis;
  f.min_loss_scale = min_scale;
  f.consecutive_hysteresis = consecutive;
  return f;
}

}  // namespace

TEST(LossScaler, StartsAtTwoToTheInitialPower) {
  EXPECT_EQ(LossScaler(dynamic_fp16(16, 1000, 2)).scale(), 65536.0);
  EXPECT_EQ(LossScaler(dynamic_fp16(0, 1000, 2)).scale(), 1.0);
  EXPECT_TRUE(LossScaler(dynamic_fp16(16, 1000, 2)).dynamic());
}

TEST(LossScaler, OverflowSkipsAndHalvesWithoutHysteresis) {
  LossScaler s(dynamic_fp16(4, 1000, 1), /*log_messages=*/false);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 4.0);
  EXPECT_EQ(s.state().cur_iter, 3);
  EXPECT_EQ(s.state().last_overflow_iter, 2);
}

// DeepSpeed's order: an overflow first spends hysteresis (scale kept); once one
// is left, each overflow halves; hysteresis refills only at a window growth.
TEST(LossScaler, HysteresisDelaysTheFirstDecrease) {
  LossScaler s(dynamic_fp16(4, 1000, 3), false);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_EQ(s.state().cur_hysteresis, 2);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_EQ(s.state().cur_hysteresis, 1);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 8.0);
  s.update(false);  // a clean step does not refill without consecutive_hysteresis
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 4.0);
  EXPECT_EQ(s.state().cur_hysteresis, 1);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaler s(dynamic_fp16(4, 1000, 2, 1.0, /*consecutive=*/true), false);
  for (int i = 0; i < 5; ++i) {  // isolated overflows never lower the scale
    EXPECT_TRUE(s.update(true));
    EXPECT_FALSE(s.update(false));
    EXPECT_EQ(s.state().cur_hysteresis, 2);
  }
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));  // two in a row do
  EXPECT_EQ(s.scale(), 8.0);
}

// The scale doubles on the update where (cur_iter - last_overflow_iter - 1) is a
// positive multiple of the window.
TEST(LossScaler, GrowsAfterEachWindowOfCleanSteps) {
  LossScaler s(dynamic_fp16(4, 3, 2), false);
  // From the start (last_overflow_iter -1): doubling at cur_iter 3 and 6.
  const double after_clean[] = {16, 16, 16, 32, 32, 32, 64};
  for (double expected : after_clean) {
    EXPECT_FALSE(s.update(false));
    EXPECT_EQ(s.scale(), expected);
  }
  // Overflows at cur_iter 7 (hysteresis 2 -> 1) and 8 (64 -> 32); then the
  // doubling comes at cur_iter 8 + 3 + 1 = 12, and refills hysteresis.
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 32.0);
  EXPECT_EQ(s.state().cur_hysteresis, 1);
  for (int iter = 9; iter <= 11; ++iter) {
    s.update(false);
    EXPECT_EQ(s.scale(), 32.0) << iter;
  }
  s.update(false);  // cur_iter 12
  EXPECT_EQ(s.scale(), 64.0);
  EXPECT_EQ(s.state().cur_hysteresis, 2);
}

TEST(LossScaler, NeverBelowTheMinimum) {
  LossScaler s(dynamic_fp16(3, 1000, 1, /*min=*/3.0), false);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 3.0);  // max(4 / 2, 3)
}

// Stratum raises after `hysteresis` consecutive overflows at the minimum
// (DeepSpeed would raise on the first one there with no hysteresis left).
TEST(LossScaler, ErrorAfterHysteresisConsecutiveOverflowsAtTheMinimum) {
  LossScaler s(dynamic_fp16(2, 1000, 2), false);
  s.update(true);  // 4, hysteresis 2 -> 1
  s.update(true);  // 2
  s.update(true);  // 1: reaching the minimum is no error
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_TRUE(s.update(true));  // 1st at the minimum: skipped
  EXPECT_FALSE(s.update(false));  // a clean step resets the count
  EXPECT_EQ(s.state().overflows_at_min, 0);
  EXPECT_TRUE(s.update(true));
  try {
    s.update(true);
    FAIL() << "no error at the minimum loss scale";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("at the minimum loss scale 1 (fp16.min_loss_scale)"), std::string::npos) << m;
    EXPECT_NE(m.find("training diverges"), std::string::npos) << m;
    EXPECT_NE(m.find("use bf16"), std::string::npos) << m;
  }
}

TEST(LossScaler, ErrorAtOnceAtTheMinimumWithHysteresisOne) {
  LossScaler s(dynamic_fp16(1, 1000, 1), false);
  s.update(true);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_THROW(s.update(true), Error);
}

// With consecutive_hysteresis, Stratum's rule is DeepSpeed's: at the minimum,
// hysteresis counts the overflows down and a clean step refills it.
TEST(LossScaler, AtTheMinimumWithConsecutiveHysteresis) {
  LossScaler s(dynamic_fp16(0, 1000, 3, 1.0, /*consecutive=*/true));  // starts at the minimum
  testing::internal::CaptureStderr();
  EXPECT_TRUE(s.update(true));
  const std::string first = testing::internal::GetCapturedStderr();
  EXPECT_NE(first.find("fp16: gradient overflow at step 0, skipping it; loss scale already at the minimum 1 "
                       "(fp16.min_loss_scale): 2 more in a row stops training"),
            std::string::npos)
      << first;
  EXPECT_EQ(s.state().cur_hysteresis, 2);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.state().cur_hysteresis, 3);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_THROW(s.update(true), Error);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScaler, StaticScaleNeverChanges) {
  config::Fp16Config f;
  f.enabled = true;
  f.loss_scale = 128.0;
  f.loss_scale_window = 2;
  LossScaler s(f, false);
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(s.update(true));
    EXPECT_FALSE(s.update(false));
    EXPECT_FALSE(s.update(false));
    EXPECT_EQ(s.scale(), 128.0);
  }
  config::Fp16Config off;  // fp16 disabled: scale 1
  EXPECT_EQ(LossScaler(off).scale(), 1.0);
  EXPECT_FALSE(LossScaler(off).dynamic());
}

TEST(LossScaler, OneLineMessages) {
  LossScaler s(dynamic_fp16(16, 1000, 2));
  testing::internal::CaptureStderr();
  s.update(false);
  s.update(true);
  s.update(true);
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("fp16: gradient overflow at step 1, skipping it; loss scale stays 65536 (hysteresis 2 -> 1)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("fp16: gradient overflow at step 2, skipping it; loss scale 65536 -> 32768\n"), std::string::npos)
      << out;

  LossScaler quiet(dynamic_fp16(16, 1000, 2), /*log_messages=*/false);
  testing::internal::CaptureStderr();
  quiet.update(true);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(LossScaler, SaveLoadRoundTrip) {
  const auto f = dynamic_fp16(8, 4, 2);
  const bool prefix[] = {false, true, false, true, true, false, false};
  const bool suffix[] = {false, false, false, false, true, false, true, true, false, false, false, false, false};
  LossScaler a(f, false);
  for (bool o : prefix) a.update(o);
  const LossScalerState saved = a.state();  // plain numbers
  LossScaler b(f, false);
  b.load_state(saved);
  for (bool o : suffix) {
    EXPECT_EQ(a.update(o), b.update(o));
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.state().cur_hysteresis, b.state().cur_hysteresis);
    EXPECT_EQ(a.state().last_overflow_iter, b.state().last_overflow_iter);
  }
  EXPECT_EQ(a.state().cur_iter, b.state().cur_iter);
}

TEST(OverflowFlag, FiniteInfAndNan) {
  torch::manual_seed(0);
  std::vector<at::Tensor> grads = {torch::randn({1000}), torch::randn({37}).to(torch::kHalf)};
  at::Tensor flag = local_overflow_flag(grads);
  EXPECT_EQ(flag.sizes(), at::IntArrayRef({1}));
  EXPECT_EQ(flag.scalar_type(), at::kFloat);
  EXPECT_EQ(flag.item<float>(), 0.0f);

  grads[1][5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(local_overflow_flag(grads).item<float>(), 1.0f);
  grads[1][5] = 1.0f;
  grads[0][999] = std::nanf("");
  EXPECT_EQ(local_overflow_flag(grads).item<float>(), 1.0f);
  grads[0][999] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(local_overflow_flag(grads).item<float>(), 1.0f);

  // Large finite values are no overflow (an fp32 sum would overflow here).
  std::vector<at::Tensor> big = {torch::full({16}, 3e38f)};
  EXPECT_EQ(local_overflow_flag(big).item<float>(), 0.0f);
  EXPECT_EQ(local_overflow_flag({}).item<float>(), 0.0f);
}

// The growth happens inside update(): the scale the gradients were made with
// must be read before it.
TEST(LossScaler, ScaleChangesInsideUpdate) {
  LossScaler s(dynamic_fp16(4, 1, 2), false);
  s.update(false);  // cur_iter 0: no growth yet
  const double grads_made_with = s.scale();
  EXPECT_FALSE(s.update(false));  // cur_iter 1: grows
  EXPECT_EQ(grads_made_with, 16.0);
  EXPECT_EQ(s.scale(), 32.0);
}
