// Pipeline schedules as data, checked by the simulator without ranks: every
// transfer pairs in order, nothing deadlocks, every micro-batch runs forward
// then backward once per chunk (or B then W, split), in-flight activations stay
// within each schedule's bound, the bubble is the formula's, exactly, at unit
// costs, and every rank ends the step with the optimizer step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "../common/error_of.h"
#include "stratum/pipeline/schedule.h"
#include "stratum/pipeline/simulate.h"

using namespace stratum::pipeline;

using stratum::test::error_of;

TEST(PipelineSchedule, GPipeAnd1F1BHaveBubbleP1OverMAtAnyCosts) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m)
        for (Costs costs : {Costs{1.0, 1.0, 1.0}, Costs{1.0, 0.5, 0.5}, Costs{0.7, 1.2, 0.7}}) {
          const Simulation sim = simulate(make_schedule(kind, p, m), costs);
          ASSERT_NEAR(sim.bubble(), double(p - 1) / m, 1e-12)
              << stratum::config::pipeline_schedule_name(kind) << " p=" << p << " m=" << m << " F=" << costs.forward;
          ASSERT_NEAR(sim.makespan, (m + p - 1) * (costs.forward + costs.backward()), 1e-9);
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
        // A chunk is 1/v of a stage's layers: F = B = W = 1/v.
        const Simulation sim = simulate(s, Costs{1.0 / v, 1.0 / v, 1.0 / v});
        ASSERT_NEAR(sim.bubble(), double(p - 1) / (v * m), 1e-9) << "p=" << p << " v=" << v << " m=" << m;
        for (int r = 0; r < p; ++r) ASSERT_LE(sim.peak_activations[r], m * v);
      }
}

namespace {
// Where each compute of a rank runs in its list.
std::map<std::pair<Op, int>, size_t> positions(const std::vector<Action>& rank) {
  std::map<std::pair<Op, int>, size_t> at;
  for (size_t i = 0; i < rank.size(); ++i)
    if (is_compute(rank[i].op)) at[{rank[i].op, rank[i].micro}] = i;
  return at;
}
}  // namespace

TEST(PipelineSchedule, ZbH1SplitsEveryBackwardAndRunsEachWAfterItsB) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const Schedule s = make_schedule(ScheduleKind::zb_h1, p, m);
      ASSERT_NO_THROW(simulate(s)) << "p=" << p << " m=" << m;
      for (int r = 0; r < p; ++r) {
        int inputs = 0, weights = 0, full = 0;
        for (const Action& a : s.ranks[r]) {
          inputs += a.op == Op::backward_input;
          weights += a.op == Op::backward_weight;
          full += a.op == Op::backward;
        }
        ASSERT_EQ(inputs, m) << "p=" << p << " m=" << m << " rank " << r;
        ASSERT_EQ(weights, m) << "p=" << p << " m=" << m << " rank " << r;
        ASSERT_EQ(full, 0) << "p=" << p << " m=" << m << " rank " << r;
        const auto at = positions(s.ranks[r]);
        for (int i = 0; i < m; ++i)
          ASSERT_LT(at.at({Op::backward_input, i}), at.at({Op::backward_weight, i}))
              << "p=" << p << " m=" << m << " rank " << r << " micro " << i;
      }
    }
}

// The paper's memory bound: no rank holds more micro-batches between F and W
// than 1F1B's rank 0, min(p, m). (Holding every rank r to 1F1B's own
// min(p - r, m) cannot reach (p - 1)/(3m): the last rank, with one, must run
// F B W F B W...; a search over all orders for p = 2, 3 finds 2(p - 1)/(3m)
// the best bubble under that bound for m = p..p + 2.)
TEST(PipelineSchedule, ZbH1HoldsNoMoreActivationsThan1F1BsFirstStage) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const Simulation zb = simulate(make_schedule(ScheduleKind::zb_h1, p, m));
      const Simulation one = simulate(make_schedule(ScheduleKind::one_f_one_b, p, m));
      const int bound = *std::max_element(one.peak_activations.begin(), one.peak_activations.end());
      ASSERT_EQ(bound, std::min(p, m));
      for (int r = 0; r < p; ++r)
        ASSERT_LE(zb.peak_activations[r], bound) << "p=" << p << " m=" << m << " rank " << r;
      ASSERT_EQ(zb.peak_activations[0], bound) << "p=" << p << " m=" << m;
    }
}

// Unit costs F = B = W = 1: (p - 1)/(3m), a third of 1F1B's (p - 1)/m, for
// m >= p; with fewer micro-batches rank 0 still waits 2p - 1 for its first
// gradient, then runs 2m, so the bubble is (2p - m - 1)/(3m).
TEST(PipelineSchedule, ZbH1BubbleIsAThirdOf1F1BsAtUnitCosts) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const Simulation zb = simulate(make_schedule(ScheduleKind::zb_h1, p, m));
      const Simulation one = simulate(make_schedule(ScheduleKind::one_f_one_b, p, m));
      const double expected = m >= p ? double(p - 1) / (3 * m) : double(2 * p - m - 1) / (3 * m);
      ASSERT_NEAR(zb.bubble(), expected, 1e-12) << "p=" << p << " m=" << m;
      ASSERT_NEAR(zb.makespan, m >= p ? 3 * m + p - 1 : 2 * (m + p) - 1, 1e-12) << "p=" << p << " m=" << m;
      ASSERT_NEAR(one.bubble(), double(p - 1) / m, 1e-12);
      if (p > 1) {
        ASSERT_LT(zb.bubble(), one.bubble()) << "p=" << p << " m=" << m;
      }
    }
}

// Deferring W's only takes work from in front of a rank's B's and F's; over a
// range of unequal costs the ZB-H1 order never finishes after 1F1B's.
TEST(PipelineSchedule, ZbH1IsNeverSlowerThan1F1BAtUnequalCosts) {
  for (double f : {0.5, 1.0, 2.0})
    for (double b : {0.5, 1.0, 2.0})
      for (double w : {0.1, 0.5, 1.0, 2.0})
        for (int p = 2; p <= 8; ++p)
          for (int m = 1; m <= 16; ++m) {
            const Costs costs{f, b, w};
            const double zb = simulate(make_schedule(ScheduleKind::zb_h1, p, m), costs).makespan;
            const double one = simulate(make_schedule(ScheduleKind::one_f_one_b, p, m), costs).makespan;
            ASSERT_LE(zb, one + 1e-9) << "F=" << f << " B=" << b << " W=" << w << " p=" << p << " m=" << m;
          }
}

TEST(PipelineSchedule, EveryRankEndsTheStepWithTheOptimizerStep) {
  auto check = [](const Schedule& s) {
    const int p = s.stages;
    for (int r = 0; r < p; ++r) {
      const auto& actions = s.ranks[r];
      const std::string what = std::string(stratum::config::pipeline_schedule_name(s.kind)) + " p=" +
                               std::to_string(p) + " m=" + std::to_string(s.micro_batches) + " rank " +
                               std::to_string(r);
      ASSERT_GE(actions.size(), 2u) << what;
      EXPECT_EQ(actions.back(), (Action{Op::optimizer_step, -1, 0, -1})) << what;
      const bool tied = p > 1 && (r == 0 || r == p - 1);
      EXPECT_EQ(actions[actions.size() - 2].op == Op::reduce_tied, tied) << what;
      EXPECT_EQ(std::count_if(actions.begin(), actions.end(), [](const Action& a) { return a.op == Op::reduce_tied; }),
                tied ? 1 : 0) << what;
      EXPECT_EQ(std::count_if(actions.begin(), actions.end(),
                              [](const Action& a) { return a.op == Op::optimizer_step; }), 1) << what;
    }
  };
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1})
        check(make_schedule(kind, p, m));
      if (p > 1 && m % p == 0) check(make_schedule(ScheduleKind::interleaved, p, m, 2));
    }
  EXPECT_EQ(to_string(Action{Op::optimizer_step, -1, 0, -1}), "step");
  EXPECT_EQ(to_string(Action{Op::reduce_tied, -1, 0, -1}), "reduce_tied");
  EXPECT_EQ(to_string(Action{Op::backward_input, 3, 0, -1}), "B3");
  EXPECT_EQ(to_string(Action{Op::backward_weight, 3, 1, -1}), "W3.1");
}

// Costs per rank, e.g. measured: the bubble is against the busiest rank, and
// each rank's idle time is what the step makes it wait.
TEST(PipelineSchedule, PerRankCostsGiveEachRanksBusyAndIdleTime) {
  // 1F1B, p = 2, m = 1: rank 0 F 0-1, rank 1 F 1-3 and B 3-7, rank 0 B 7-9.
  const Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1);
  const Simulation sim = simulate(s, std::vector<Costs>{Costs{1, 1, 1}, Costs{2, 2, 2}});
  EXPECT_DOUBLE_EQ(sim.makespan, 9);
  EXPECT_EQ(sim.busy, (std::vector<double>{3, 6}));
  EXPECT_EQ(sim.idle, (std::vector<double>{6, 3}));
  EXPECT_DOUBLE_EQ(sim.bubble(), 0.5);
  // The same costs on every rank match the single-Costs call.
  const Schedule zb = make_schedule(ScheduleKind::zb_h1, 4, 8);
  const Costs measured{0.013, 0.011, 0.009};
  const Simulation uniform = simulate(zb, measured);
  EXPECT_DOUBLE_EQ(simulate(zb, std::vector<Costs>(4, measured)).makespan, uniform.makespan);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(uniform.busy[r], 8 * (0.013 + 0.011 + 0.009), 1e-12);
  const std::string e = error_of([&] { simulate(zb, std::vector<Costs>(3, measured)); });
  EXPECT_NE(e.find("'zb-h1': costs for 3 ranks, but it has 4 stages"), std::string::npos) << e;
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
  // A message nobody receives (sent before the step's end).
  Schedule extra = s;
  extra.ranks[0].insert(extra.ranks[0].end() - 2, Action{Op::send_act, 1, 0, 1});
  e = error_of([&] { simulate(extra); });
  EXPECT_NE(e.find("rank 0 sent 1 message(s) to rank 1 that nothing receives"), std::string::npos) << e;
  // A backward moved before its forward.
  Schedule early = make_schedule(ScheduleKind::gpipe, 1, 2);
  std::swap(early.ranks[0][0], early.ranks[0][2]);
  e = error_of([&] { simulate(early); });
  EXPECT_NE(e.find("backward before its forward"), std::string::npos) << e;
}

// On one rank, p = 1, m = 2: F0 B0 W0 F1 B1 W1 step.
TEST(PipelineSchedule, SimulatorCatchesBrokenSplitBackwards) {
  const Schedule s = make_schedule(ScheduleKind::zb_h1, 1, 2);
  ASSERT_EQ(s.ranks[0].size(), 7u);
  auto broken = [&](auto&& edit) {
    Schedule b = s;
    edit(b.ranks[0]);
    return error_of([&] { simulate(b); });
  };
  std::string e = broken([](std::vector<Action>& r) { std::swap(r[1], r[2]); });
  EXPECT_NE(e.find("rank 0, action 1 (W0): backward_weight before its backward_input"), std::string::npos) << e;
  e = broken([](std::vector<Action>& r) { r[5] = Action{Op::backward_weight, 0, 0, -1}; });
  EXPECT_NE(e.find("(W0): backward_weight run twice"), std::string::npos) << e;
  e = broken([](std::vector<Action>& r) { r.erase(r.begin() + 5, r.end()); });
  EXPECT_NE(e.find("rank 0 never runs the backward_weight of micro-batch 1 on chunk 0"), std::string::npos) << e;
  // A full backward and a split one for the same micro-batch, either way round.
  e = broken([](std::vector<Action>& r) { r[2] = Action{Op::backward, 0, 0, -1}; });
  EXPECT_NE(e.find("(B0): full backward of a micro-batch whose backward is split"), std::string::npos) << e;
  e = broken([](std::vector<Action>& r) {
    r[1] = Action{Op::backward, 0, 0, -1};
    r[2] = Action{Op::backward_weight, 0, 0, -1};
  });
  EXPECT_NE(e.find("(W0): backward_weight of a micro-batch that ran the full backward"), std::string::npos) << e;
  // The step before a W, and nothing after the step.
  e = broken([](std::vector<Action>& r) { std::swap(r[5], r[6]); });
  EXPECT_NE(e.find("(step): before the backward of micro-batch 1 on chunk 0 is done"), std::string::npos) << e;
  e = broken([](std::vector<Action>& r) { r.push_back(Action{Op::optimizer_step, -1, 0, -1}); });
  EXPECT_NE(e.find("action 7 (step): after optimizer_step"), std::string::npos) << e;
  e = broken([](std::vector<Action>& r) { r.pop_back(); });
  EXPECT_NE(e.find("rank 0 never runs optimizer_step"), std::string::npos) << e;
  // The tied embedding lives on the first and last of several stages only.
  e = broken([](std::vector<Action>& r) { r.insert(r.end() - 1, Action{Op::reduce_tied, -1, 0, -1}); });
  EXPECT_NE(e.find("(reduce_tied): one stage holds both ends of the tied embedding"), std::string::npos) << e;
  Schedule middle = make_schedule(ScheduleKind::zb_h1, 3, 3);
  middle.ranks[1].insert(middle.ranks[1].end() - 1, Action{Op::reduce_tied, -1, 0, -1});
  e = error_of([&] { simulate(middle); });
  EXPECT_NE(e.find("rank 1, action"), std::string::npos) << e;
  EXPECT_NE(e.find("only ranks 0 and 2 hold the tied embedding"), std::string::npos) << e;
  // Without its partner, the reduction waits forever.
  Schedule lone = make_schedule(ScheduleKind::zb_h1, 3, 3);
  lone.ranks[2].erase(lone.ranks[2].end() - 2);
  e = error_of([&] { simulate(lone); });
  EXPECT_NE(e.find("deadlocks"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0, action"), std::string::npos) << e;
  EXPECT_NE(e.find("(reduce_tied) waits"), std::string::npos) << e;
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
  e = error_of([] { make_schedule(ScheduleKind::zb_h1, 4, 8, 2); });
  EXPECT_NE(e.find("pipeline schedule 'zb-h1': 2 virtual stages, but only the interleaved schedule"),
            std::string::npos) << e;
  e = error_of([] { make_schedule(ScheduleKind::zb_h1, 4, 0); });
  EXPECT_NE(e.find("'zb-h1': stages (4), micro-batches (0) and virtual stages (1) must each be at least 1"),
            std::string::npos) << e;
}

TEST(PipelineSchedule, TableShowsTheOneFOneBPicture) {
  const Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 3);
  // F = 1 and a full backward of 1.
  const std::string table = schedule_table(s, simulate(s, Costs{1.0, 1.0, 0.0}));
  EXPECT_EQ(table,
            "rank 0 | F0 F1 .  B0 F2 B1 .  B2\n"
            "rank 1 | .  F0 B0 F1 B1 F2 B2 . \n")
      << table;
}

TEST(PipelineSchedule, TableLabelsTheSplitBackwardsHalves) {
  const Schedule s = make_schedule(ScheduleKind::zb_h1, 2, 2);
  const std::string table = schedule_table(s, simulate(s));
  EXPECT_EQ(table,
            "rank 0 | F0 F1 .  B0 W0 B1 W1\n"
            "rank 1 | .  F0 B0 F1 B1 W0 W1\n")
      << table;
}

TEST(PipelineSchedule, HugeCountsAreRefusedBeforeAnythingIsBuilt) {
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([] { make_schedule(ScheduleKind::one_f_one_b, 4096, 2147483647); });
  EXPECT_NE(e.find("4096 stages x 2147483647 micro-batches x 1 virtual stages is 8796093018112 forward passes"),
            std::string::npos) << e;
  e = error_of([] { make_schedule(ScheduleKind::interleaved, 1024, 1 << 20, 1024); });
  EXPECT_NE(e.find("use fewer micro-batches (gradient_accumulation_steps) or stages"), std::string::npos) << e;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.5);
}

// Evaluation and generation: every micro-batch through every chunk once,
// forward alone, at any p, m (not only multiples of p) and v; at v = 1 the
// micro-batches pipeline (makespan m + p - 1 forwards), and a rank holds one
// activation at a time.
TEST(PipelineSchedule, ForwardScheduleRunsEveryChunkOnceAndPipelines) {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 13; ++m)
      for (int v = 1; v <= 3; ++v) {
        const Schedule s = make_forward_schedule(p, m, v);
        const Simulation sim = simulate(s, Costs{1.0, 1.0, 1.0});
        for (int r = 0; r < p; ++r) {
          int forwards = 0;
          for (const Action& a : s.ranks[r]) {
            ASSERT_TRUE(a.op == Op::forward || a.op == Op::send_act || a.op == Op::recv_act)
                << to_string(a) << " p=" << p << " m=" << m << " v=" << v;
            forwards += a.op == Op::forward;
          }
          ASSERT_EQ(forwards, m * v) << "rank " << r;
          ASSERT_EQ(sim.peak_activations[r], 1);
        }
        if (v == 1) ASSERT_NEAR(sim.makespan, m + p - 1, 1e-12) << "p=" << p << " m=" << m;
      }
  // A backward slipped into it is named.
  Schedule s = make_forward_schedule(2, 2);
  s.ranks[1].push_back(Action{Op::backward, 0, 0, -1});
  const std::string e = error_of([&] { simulate(s); });
  EXPECT_NE(e.find("a backward in a forward-only schedule"), std::string::npos) << e;
  EXPECT_NE(error_of([] { make_forward_schedule(2, 0); }).find("at least 1"), std::string::npos);
}
