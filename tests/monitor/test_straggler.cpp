// The straggler check: a rank persistently slower than the median of its
// peers is named once, and again when it keeps pace.
#include <gtest/gtest.h>

#include "stratum/monitor/straggler.h"

using namespace stratum::monitor;

namespace {

TEST(Straggler, NamedAfterConsecutiveSlowStepsAndWhenItRecovers) {
  StragglerCheck check(StragglerOptions{0.25, 3, 0.01});
  const std::vector<double> slow{0.10, 0.31, 0.11, 0.10};
  const std::vector<double> even{0.10, 0.11, 0.11, 0.10};
  EXPECT_TRUE(check.update(1, slow).empty());
  EXPECT_TRUE(check.update(2, slow).empty());
  const auto lines = check.update(3, slow);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("straggler: rank 1's own work in a step"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("more than 25% above the median of the other 3 ranks of its stage for 3 steps in a row "
                          "(steps 1-3); at step 3 0.310 s against 0.100 s (+210%)"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(check.flagged(), std::vector<int>{1});
  EXPECT_TRUE(check.update(4, slow).empty());  // named once
  EXPECT_TRUE(check.update(5, even).empty());
  EXPECT_TRUE(check.update(6, even).empty());
  const auto back = check.update(7, even);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_NE(back[0].find("straggler: rank 1 keeps pace again (3 steps in a row"), std::string::npos) << back[0];
  EXPECT_TRUE(check.flagged().empty());
}

TEST(Straggler, AnInterruptedStreakStartsAgain) {
  StragglerCheck check(StragglerOptions{0.25, 3, 0.01});
  const std::vector<double> slow{0.1, 0.3}, even{0.1, 0.1};
  check.update(1, slow);
  check.update(2, slow);
  EXPECT_TRUE(check.update(3, even).empty());
  EXPECT_TRUE(check.update(4, slow).empty());
  EXPECT_TRUE(check.update(5, slow).empty());
  EXPECT_EQ(check.update(6, slow).size(), 1u);  // two ranks: against the other one
}

TEST(Straggler, NoiseBelowTheThresholdOrTheFloorIsNotFlagged) {
  StragglerCheck check(StragglerOptions{0.25, 2, 0.01});
  for (int s = 1; s <= 5; ++s) {
    EXPECT_TRUE(check.update(s, {0.100, 0.120, 0.100}).empty());  // +20%
    EXPECT_TRUE(check.update(s, {0.001, 0.005, 0.001}).empty());  // +400% of nothing: under 10 ms
  }
}

TEST(Straggler, RanksAreComparedWithinTheirCohort) {
  StragglerCheck check(StragglerOptions{0.25, 1, 0.01});
  // Stage 1 (ranks 2, 3) does twice stage 0's work: nobody is a straggler.
  EXPECT_TRUE(check.update(1, {0.1, 0.1, 0.2, 0.2}, {0, 0, 1, 1}).empty());
  const auto lines = check.update(2, {0.1, 0.1, 0.2, 0.4}, {0, 0, 1, 1});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("rank 3's"), std::string::npos) << lines[0];
  // A rank alone in its cohort has nobody to be compared with.
  EXPECT_TRUE(StragglerCheck(StragglerOptions{0.25, 1, 0.01}).update(1, {0.1, 5.0}, {0, 1}).empty());
}

}  // namespace
