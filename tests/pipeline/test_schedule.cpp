// Pipeline schedules as data, checked by the simulator without ranks: every
// transfer pairs in order, nothing deadlocks, every micro-batch runs forward
// then backward once per chunk, in-flight activations stay within each
// schedule's bound, and the bubble is the formula's, exactly, at unit costs.
#include <gtest/gtest.h>

#include <algorithm>

#include "../common/error_of.h"
#include "stratum/pipeline/schedule.h"
#include "stratum/pipeline/simulate.h"

using namespace stratum::pipeline;

using stratum::test::error_of;

TEST(PipelineSchedule, GPipeAnd1F1BHaveBubbleP1OverMAtAnyCosts) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m)
        for (Costs costs : {Costs{1.0, 2.0}, Costs{1.0, 1.0}, Costs{0.7, 1.9}}) {
          const Simulation sim = simulate(make_schedule(kind, p, m), costs);
          ASSERT_NEAR(sim.bubble(), double(p - 1) / m, 1e-12)
              << stratum::config::pipeline_schedule_name(kind) << " p=" << p << " m=" << m << " F=" << costs.forward;
          ASSERT_NEAR(sim.makespan, (m + p - 1) * (costs.forward + costs.backward), 1e-9);
        }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPMinusSActivationsGPipeAllOfThem) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const Simulation one = simulate(make_schedule(ScheduleKind::one_f_one_b, p, m));
      const Simulation all = simulate(make_schedule(ScheduleKind::gpipe, p, m));
      for (int s = 0; s < p; ++s) {
        ASSERT_EQ(one.peak_activations[s], std::min(p - s, m)) << "1f1b p=" << p << " m=" << m << " stage " << s;
        ASSERT_EQ(all.peak_activations[s], m) << "gpipe p=" << p << " m=" << m << " stage " << s;
      }
    }
}

TEST(PipelineSchedule, InterleavedHasBubbleP1OverVM) {
  for (int p = 2; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 32; m += p) {
        const Schedule s = make_schedule(ScheduleKind::interleaved, p, m, v);
        // A chunk is 1/v of a stage's layers: F = 1/v, B = 2/v.
        const Simulation sim = simulate(s, Costs{1.0 / v, 2.0 / v});
        ASSERT_NEAR(sim.bubble(), double(p - 1) / (v * m), 1e-9) << "p=" << p << " v=" << v << " m=" << m;
        for (int r = 0; r < p; ++r) ASSERT_LE(sim.peak_activations[r], m * v);
      }
}

TEST(PipelineSchedule, EveryRankRunsItsChunksAndTransfersMatch) {
  const Schedule s = make_schedule(ScheduleKind::interleaved, 4, 8, 2);
  for (int r = 0; r < 4; ++r) {
    int forwards = 0, backwards = 0, sends = 0, recvs = 0;
    for (const Action& a : s.ranks[r]) {
      forwards += a.op == Op::forward;
      backwards += a.op == Op::backward;
      sends += a.op == Op::send_act || a.op == Op::send_grad;
      recvs += a.op == Op::recv_act || a.op == Op::recv_grad;
    }
    EXPECT_EQ(forwards, 16) << "rank " << r;
    EXPECT_EQ(backwards, 16) << "rank " << r;
    // Virtual stages 0 and 7 have one neighbour; every other has two.
    EXPECT_EQ(sends, r == 0 || r == 3 ? 16 + 8 : 32) << "rank " << r;
    EXPECT_EQ(recvs, sends) << "rank " << r;
  }
  EXPECT_EQ(s.ranks[3][2], (Action{Op::send_act, 0, 0, 0})) << "the last rank's chunk 0 feeds rank 0's chunk 1";
}

TEST(PipelineSchedule, SimulatorCatchesBrokenSchedules) {
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 2);
  // Rank 1's two receives swapped: transfers pair in order.
  Schedule swapped = s;
  auto& r1 = swapped.ranks[1];
  const auto first = std::find_if(r1.begin(), r1.end(), [](const Action& a) { return a.op == Op::recv_act; });
  const auto second = std::find_if(first + 1, r1.end(), [](const Action& a) { return a.op == Op::recv_act; });
  std::swap(first->micro, second->micro);
  std::string e = error_of([&] { simulate(swapped); });
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("transfers pair in order"), std::string::npos) << e;
  // The last activation send dropped: its receiver waits forever, and so does
  // the rank waiting on that receiver's gradient.
  Schedule dropped = s;
  auto& r0 = dropped.ranks[0];
  r0.erase(std::find_if(r0.rbegin(), r0.rend(), [](const Action& a) { return a.op == Op::send_act; }).base() - 1);
  e = error_of([&] { simulate(dropped); });
  EXPECT_NE(e.find("deadlocks"), std::string::npos) << e;
  EXPECT_NE(e.find("(recv_act 1 <- 0) waits"), std::string::npos) << e;
  EXPECT_NE(e.find("(recv_grad 1 <- 1) waits"), std::string::npos) << e;
  // A message nobody receives.
  Schedule extra = s;
  extra.ranks[0].push_back(Action{Op::send_act, 1, 0, 1});
  e = error_of([&] { simulate(extra); });
  EXPECT_NE(e.find("rank 0 sent 1 message(s) to rank 1 that nothing receives"), std::string::npos) << e;
  // A backward moved before its forward.
  Schedule early = make_schedule(ScheduleKind::gpipe, 1, 2);
  std::swap(early.ranks[0][0], early.ranks[0][2]);
  e = error_of([&] { simulate(early); });
  EXPECT_NE(e.find("backward before its forward"), std::string::npos) << e;
}

TEST(PipelineSchedule, BadShapesAreRefusedWithTheNumbers) {
  std::string e = error_of([] { make_schedule(ScheduleKind::interleaved, 4, 6, 2); });
  EXPECT_NE(e.find("6 micro-batches (gradient_accumulation_steps) is not a multiple of the 4 stages"),
            std::string::npos) << e;
  e = error_of([] { make_schedule(ScheduleKind::one_f_one_b, 4, 8, 2); });
  EXPECT_NE(e.find("2 virtual stages, but only the interleaved schedule"), std::string::npos) << e;
  e = error_of([] { make_schedule(ScheduleKind::gpipe, 0, 8); });
  EXPECT_NE(e.find("must each be at least 1"), std::string::npos) << e;
  e = error_of([] { make_schedule(ScheduleKind::interleaved, 2, 4, 1); });
  EXPECT_NE(e.find("needs at least 2 stages and 2 virtual stages"), std::string::npos) << e;
}

TEST(PipelineSchedule, TableShowsTheOneFOneBPicture) {
  const Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 3);
  const std::string table = schedule_table(s, simulate(s, Costs{1.0, 1.0}));
  EXPECT_EQ(table,
            "rank 0 | F0 F1 .  B0 F2 B1 .  B2\n"
            "rank 1 | .  F0 B0 F1 B1 F2 B2 . \n")
      << table;
}
