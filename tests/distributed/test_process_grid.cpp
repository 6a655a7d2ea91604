// ProcessGrid's pure parts: the grid-shape problems of a config (each message
// naming its key and numbers), the leaders' and tied embedding's partitions,
// and the one-line summary. No ranks needed.
#include <gtest/gtest.h>

#include <algorithm>

#include "stratum/config/config.h"
#include "stratum/core/error.h"
#include "stratum/distributed/process_grid.h"

using namespace stratum;
using namespace stratum::distributed;
using Groups = ProcessGrid::Groups;

namespace {

Config config_of(int64_t pp, int64_t tp, const std::string& order = "tp-dp-pp", const std::string& extra = "") {
  std::string json = R"({"train_micro_batch_size_per_gpu": 1, "pipeline": {"stages": )" + std::to_string(pp) + "}";
  if (tp > 1) json += R"(, "tensor_parallel": {"autotp_size": )" + std::to_string(tp) + "}";
  json += R"(, "topology": {"order": ")" + order + "\"}" + extra + "}";
  return Config::from_string(json, "grid.json");
}

// Each rank in exactly one group.
bool is_partition(const Groups& groups, int64_t world) {
  std::vector<int> seen(static_cast<size_t>(world), 0);
  for (const auto& g : groups)
    for (int64_t r : g) {
      if (r < 0 || r >= world) return false;
      ++seen[static_cast<size_t>(r)];
    }
  return std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; });
}

const char* kOrders[] = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-dp-tp", "pp-tp-dp"};

}  // namespace

TEST(ProcessGridProblems, EveryFittingShapeHasNone) {
  for (int world : {1, 2, 4, 8, 16})
    for (int64_t pp = 1; pp <= world; pp *= 2)
      for (int64_t tp = 1; pp * tp <= world; tp *= 2)
        for (const char* order : kOrders)
          EXPECT_EQ(ProcessGrid::problems(config_of(pp, tp, order), world, world), std::vector<std::string>{})
              << world << " ranks, pp " << pp << ", tp " << tp << ", " << order;
}

TEST(ProcessGridProblems, StagesNotDividingTheJob) {
  EXPECT_EQ(ProcessGrid::problems(config_of(3, 1), 8, 8),
            std::vector<std::string>{"pipeline.stages: 3 stages do not divide the 8 ranks of the job; use a divisor of 8"});
  EXPECT_EQ(ProcessGrid::problems(config_of(2, 1), 1, 1),
            std::vector<std::string>{"pipeline.stages: 2 stages do not divide the 1 ranks of the job; use a divisor of 1"});
}

TEST(ProcessGridProblems, StagesTimesTensorParallelNotDividingTheJob) {
  EXPECT_EQ(ProcessGrid::problems(config_of(2, 3), 8, 8),
            std::vector<std::string>{"pipeline.stages: 2 stages x tensor_parallel.autotp_size 3 = 6 do not divide the 8 "
                                     "ranks of the job; with 2 stages use a tensor-parallel size dividing 4"});
  EXPECT_EQ(ProcessGrid::problems(config_of(2, 8), 8, 8),
            std::vector<std::string>{"pipeline.stages: 2 stages x tensor_parallel.autotp_size 8 = 16 do not divide "
                                     "the 8 ranks of the job; with 2 stages use a tensor-parallel size dividing 4"});
  // One stage: the tensor-parallel size is the key to change.
  EXPECT_EQ(ProcessGrid::problems(config_of(1, 3), 8, 8),
            std::vector<std::string>{"tensor_parallel.autotp_size: 3 does not divide the 8 ranks of the job; "
                                     "use a divisor of 8"});
}

TEST(ProcessGridProblems, TensorParallelGroupSpanningNodes) {
  // 8 ranks on nodes of 2: a group of 4 would span two nodes.
  EXPECT_EQ(ProcessGrid::problems(config_of(1, 4), 8, 2),
            std::vector<std::string>{"tensor_parallel.autotp_size: 4 does not divide the 2 ranks of a node (the fewest "
                                     "any node of the 8-rank job runs): a tensor-parallel group would span nodes; use "
                                     "a divisor of 2"});
  // Nodes of 3 (the fewest): 2 does not divide it either.
  EXPECT_EQ(ProcessGrid::problems(config_of(1, 2), 6, 3).size(), 1u);
  EXPECT_TRUE(ProcessGrid::problems(config_of(1, 2), 8, 2).empty());
  EXPECT_TRUE(ProcessGrid::problems(config_of(2, 2), 8, 4).empty());
  // One node (or a node count unknown: fewest = world): nothing to span.
  EXPECT_TRUE(ProcessGrid::problems(config_of(1, 8), 8, 8).empty());
  EXPECT_TRUE(ProcessGrid::problems(config_of(1, 4), 4, 8).empty());
}

TEST(ProcessGridProblems, OrderSpreadingTensorParallelOverNodes) {
  // 8 ranks, nodes of 4, TP 2: "dp-tp-pp" strides a group over dp = 4 ranks.
  EXPECT_EQ(ProcessGrid::problems(config_of(1, 2, "dp-tp-pp"), 8, 4),
            std::vector<std::string>{"topology.order: \"dp-tp-pp\" puts the tensor-parallel group [0, 4] on ranks 4 "
                                     "apart, across nodes of 4 ranks (the fewest any node of the 8-rank job runs); put "
                                     "tp first (\"tp-dp-pp\") so that each tensor-parallel group is consecutive ranks "
                                     "of one node"});
  // With tp first, any order of the rest keeps a group inside a node.
  for (const char* order : {"tp-dp-pp", "tp-pp-dp"}) EXPECT_TRUE(ProcessGrid::problems(config_of(2, 2, order), 8, 4).empty());
  // A stride that stays inside the node is fine: dp 2 on nodes of 4 puts a group 2 apart.
  EXPECT_TRUE(ProcessGrid::problems(config_of(2, 2, "dp-tp-pp"), 8, 4).empty());
  EXPECT_TRUE(ProcessGrid::problems(config_of(2, 2, "pp-tp-dp"), 8, 4).empty());
  // pp fastest over 4 stages: a group's ranks are 4 apart, on two nodes of 4.
  const auto found = ProcessGrid::problems(config_of(4, 2, "pp-tp-dp"), 16, 4);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rfind("topology.order: \"pp-tp-dp\" puts the tensor-parallel group [0, 4] on ranks 4 apart", 0), 0u)
      << found[0];
}

TEST(ProcessGridProblems, VirtualStagesNeedSeveralStages) {
  Config c = Config::from_string(R"({"train_micro_batch_size_per_gpu": 1, "pipeline": {"stages": 1, "schedule": )"
                                 R"("interleaved", "virtual_stages": 2}})",
                                 "grid.json");
  EXPECT_EQ(ProcessGrid::problems(c, 4, 4),
            std::vector<std::string>{"pipeline.virtual_stages: 2 virtual stages interleave chunks over several "
                                     "pipeline stages, but pipeline.stages is 1; use pipeline.stages of 2 or more, or "
                                     "virtual_stages 1"});
  c.pipeline.stages = 2;
  EXPECT_TRUE(ProcessGrid::problems(c, 4, 4).empty());
}

TEST(ProcessGridProblems, EveryProblemAtOnce) {
  Config c = config_of(3, 4);
  c.pipeline.virtual_stages = 2;
  c.pipeline.stages = 1;
  c.tensor_parallel.size = 3;
  // 8 ranks, nodes of 2: TP 3 divides neither the job nor a node, and one stage has no chunks to interleave.
  const auto found = ProcessGrid::problems(c, 8, 2);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].rfind("tensor_parallel.autotp_size: 3 does not divide the 8 ranks of the job", 0), 0u) << found[0];
  EXPECT_EQ(found[1].rfind("tensor_parallel.autotp_size: 3 does not divide the 2 ranks of a node", 0), 0u) << found[1];
  EXPECT_EQ(found[2].rfind("pipeline.virtual_stages: 2 virtual stages", 0), 0u) << found[2];
  c.pipeline.virtual_stages = 1;
  c.pipeline.stages = 3;
  const auto more = ProcessGrid::problems(c, 8, 2);
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0].rfind("pipeline.stages: 3 stages do not divide the 8 ranks", 0), 0u) << more[0];
}

TEST(ProcessGridProblems, ConfigBuiltInCode) {
  Config c;
  c.pipeline.stages = 0;
  c.tensor_parallel.size = 0;
  EXPECT_EQ(ProcessGrid::problems(c, 4, 4),
            (std::vector<std::string>{"pipeline.stages: 0; use at least 1",
                                      "tensor_parallel.autotp_size: 0; use 1 (off) or more"}));
  EXPECT_THROW(ProcessGrid::problems(Config{}, 0, 1), stratum::Error);
  EXPECT_THROW(ProcessGrid::problems(Config{}, 4, 0), stratum::Error);
}

TEST(ProcessGridGroups, LeadersOnTwoByTwoByTwo) {
  // tp-dp-pp: rank = tp + 2 dp + 4 pp; data-parallel index 0 is ranks 0, 1, 4, 5.
  const Topology t = Topology::create(8, 2, 2, 2);
  EXPECT_EQ(ProcessGrid::leader_groups(t), (Groups{{0, 1, 4, 5}, {2}, {3}, {6}, {7}}));
  // tp-pp-dp: dp is slowest, so its index 0 is the first half.
  EXPECT_EQ(ProcessGrid::leader_groups(Topology::create(8, 2, 2, 2, "tp-pp-dp")), (Groups{{0, 1, 2, 3}, {4}, {5}, {6}, {7}}));
  // pp-tp-dp: rank = pp + 2 tp + 4 dp; ranked by (pp, tp), not by world rank.
  EXPECT_EQ(ProcessGrid::leader_groups(Topology::create(8, 2, 2, 2, "pp-tp-dp")), (Groups{{0, 2, 1, 3}, {4}, {5}, {6}, {7}}));
  for (const char* order : kOrders) {
    const Topology u = Topology::create(8, 2, 2, 2, order);
    const Groups g = ProcessGrid::leader_groups(u);
    EXPECT_TRUE(is_partition(g, 8)) << order;
    ASSERT_EQ(g[0].size(), 4u) << order;
    for (size_t i = 0; i < g[0].size(); ++i) {  // shard order: stage x tp + tp rank
      const Coord c = u.coord_of(g[0][i]);
      EXPECT_EQ(c.dp, 0) << order;
      EXPECT_EQ(c.pp * u.tp() + c.tp, static_cast<int64_t>(i)) << order;
    }
  }
}

TEST(ProcessGridGroups, LeadersAtOneStageAreTheTensorParallelRanksOfDataParallelZero) {
  for (const char* order : kOrders) {
    const Topology t = Topology::from_model_parallel(8, 1, 2, order);
    const Groups g = ProcessGrid::leader_groups(t);
    EXPECT_EQ(g[0], t.group(Axis::tp, t.rank_of(Coord{0, 0, 0}))) << order;
    EXPECT_EQ(g.size(), 1u + 8u - 2u) << order;
  }
  EXPECT_EQ(ProcessGrid::leader_groups(Topology::from_model_parallel(8, 1, 4))[0], (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(ProcessGridGroups, LeadersAtTensorParallelOneAreTheStagesOfDataParallelZero) {
  for (const char* order : kOrders) {
    const Topology t = Topology::from_model_parallel(8, 4, 1, order);
    EXPECT_EQ(ProcessGrid::leader_groups(t)[0], t.group(Axis::pp, t.rank_of(Coord{0, 0, 0}))) << order;
  }
  EXPECT_EQ(ProcessGrid::leader_groups(Topology::from_model_parallel(8, 2, 1))[0], (std::vector<int64_t>{0, 4}));
  // Pure data parallel: rank 0 alone leads.
  EXPECT_EQ(ProcessGrid::leader_groups(Topology::from_model_parallel(4, 1, 1)), (Groups{{0}, {1}, {2}, {3}}));
}

// Expert parallelism cut from data parallelism: 8 ranks, tp 2 (tp-dp-pp:
// rank = tp + 2 dp), dp 4, ep 2. Each tp index's dp ranks in blocks of 2 are
// the expert groups; one place in the blocks the experts' data-parallel
// groups; the leaders the dp indices below ep, by (tp, dp); the partitioned
// tied groups one expert index's ranks.
TEST(ProcessGridGroups, ExpertParallelGroupsCutFromDataParallel) {
  const Topology t = Topology::from_model_parallel(8, 1, 2);
  EXPECT_EQ(ProcessGrid::expert_groups(t, 2), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(ProcessGrid::expert_data_groups(t, 2), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ProcessGrid::leader_groups(t, 2), (Groups{{0, 2, 1, 3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(ProcessGrid::expert_groups(t, 4), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  // 2 stages x dp 4 (pp slowest: stage 1 is ranks 4-7), ep 2, partitioned: stage 0 and 1 of dp % 2.
  const Topology p = Topology::from_model_parallel(8, 2, 1);
  EXPECT_EQ(ProcessGrid::tied_groups(p, false, 2), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(ProcessGrid::tied_groups(p, false, 1), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  Config c;
  c.moe.expert_parallel_size = 3;
  const auto problems = ProcessGrid::problems(c, 8, 8);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("moe.expert_parallel_size: 3 does not divide the 8 data-parallel ranks"), std::string::npos)
      << problems[0];
}

// Context parallelism cut from data parallelism as expert parallelism is: 8
// ranks, tp 2 (rank = tp + 2 dp), dp 4, cp 4 as 2 ring ranks x 2 Ulysses
// ranks. Each tp index's four dp ranks are one context-parallel group, its
// consecutive pairs the Ulysses groups, and the ranks of one place in the
// pairs the ring groups; a size that does not divide the data-parallel
// ranks is refused by key.
TEST(ProcessGridGroups, ContextParallelGroupsCutFromDataParallel) {
  const Topology t = Topology::from_model_parallel(8, 1, 2);
  EXPECT_EQ(ProcessGrid::expert_groups(t, 4), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(ProcessGrid::expert_groups(t, 2), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(ProcessGrid::context_ring_groups(t, 4, 2), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(ProcessGrid::context_ring_groups(t, 4, 1), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(ProcessGrid::context_ring_groups(t, 2, 2), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  Config c;
  c.tensor_parallel.size = 2;
  c.context_parallel.size = 3;
  const auto problems = ProcessGrid::problems(c, 8, 8);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("context_parallel.size: 3 does not divide the 4 data-parallel ranks"), std::string::npos)
      << problems[0];
}

TEST(ProcessGridGroups, TiedOnTwoByTwoByTwo) {
  const Topology t = Topology::create(8, 2, 2, 2);
  // ZeRO-0: stage 0 and stage 1 of each (dp, tp) pipeline.
  EXPECT_EQ(ProcessGrid::tied_groups(t, true), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // Partitioned: every end-stage rank of one tp index.
  EXPECT_EQ(ProcessGrid::tied_groups(t, false), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(ProcessGridGroups, TiedLeavesTheMiddleStagesAlone) {
  // 8 ranks, pp 4, dp 2: rank = dp + 2 pp; stage 0 is 0, 1 and stage 3 is 6, 7.
  const Topology t = Topology::from_model_parallel(8, 4, 1);
  EXPECT_EQ(ProcessGrid::tied_groups(t, true), (Groups{{0, 6}, {1, 7}, {2}, {3}, {4}, {5}}));
  EXPECT_EQ(ProcessGrid::tied_groups(t, false), (Groups{{0, 1, 6, 7}, {2}, {3}, {4}, {5}}));
  // One stage holds both ends: nothing to pair.
  EXPECT_EQ(ProcessGrid::tied_groups(Topology::from_model_parallel(4, 1, 2), true), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(ProcessGrid::tied_groups(Topology::from_model_parallel(4, 1, 2), false), (Groups{{0}, {1}, {2}, {3}}));
}

TEST(ProcessGridGroups, TiedGroupsStartAtStageZeroInEveryOrder) {
  // The first member broadcasts the tied weights at start: it must hold stage 0.
  for (const char* order : kOrders)
    for (int64_t pp : {2, 4})
      for (int64_t tp : {1, 2})
        for (bool whole : {true, false}) {
          const Topology t = Topology::from_model_parallel(16, pp, tp, order);
          const Groups g = ProcessGrid::tied_groups(t, whole);
          EXPECT_TRUE(is_partition(g, 16)) << order;
          for (const auto& group : g) {
            if (group.size() == 1) {
              const int64_t stage = t.coord_of(group[0]).pp;
              EXPECT_TRUE(stage != 0 && stage != pp - 1) << order << ": rank " << group[0] << " left alone";
              continue;
            }
            EXPECT_EQ(t.coord_of(group.front()).pp, 0) << order;
            EXPECT_EQ(static_cast<int64_t>(group.size()), whole ? 2 : 2 * t.dp()) << order;
            for (int64_t r : group) {
              EXPECT_EQ(t.coord_of(r).tp, t.coord_of(group.front()).tp) << order;
              if (whole) EXPECT_EQ(t.coord_of(r).dp, t.coord_of(group.front()).dp) << order;
            }
          }
        }
}

TEST(ProcessGridGroups, Summary) {
  EXPECT_EQ(ProcessGrid::summary(Topology::create(8, 2, 2, 2)),
            "8 ranks: 2 data-parallel x 2 pipeline stages x 2 tensor-parallel, order tp-dp-pp");
  EXPECT_EQ(ProcessGrid::summary(Topology::create(1, 1, 1, 1)),
            "1 rank: 1 data-parallel x 1 pipeline stage x 1 tensor-parallel, order tp-dp-pp");
  EXPECT_EQ(ProcessGrid::summary(Topology::create(16, 4, 2, 2, "tp-pp-dp")),
            "16 ranks: 4 data-parallel x 2 pipeline stages x 2 tensor-parallel, order tp-pp-dp");
}
