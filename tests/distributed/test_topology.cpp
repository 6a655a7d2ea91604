// Topology: the DP x PP x TP grid, checked against Megatron's documented layout.
#include <gtest/gtest.h>

#include "stratum/core/error.h"
#include "stratum/distributed/topology.h"

using namespace stratum::distributed;
using Groups = std::vector<std::vector<int64_t>>;

// Megatron-LM parallel_state.py docstring: 16 GPUs, TP 2, PP 4 (so DP 2).
TEST(Topology, MegatronSixteenRankExample) {
  Topology t = Topology::create(16, 2, 4, 2);
  EXPECT_EQ(t.groups(Axis::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(t.groups(Axis::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(t.groups(Axis::pp), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(t.dp_tp_groups(), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
}

TEST(Topology, CoordinatesRoundTripForEveryShape) {
  for (int64_t world : {1, 2, 4, 8, 16})
    for (int64_t pp = 1; pp <= world; pp *= 2)
      for (int64_t tp = 1; pp * tp <= world; tp *= 2)
        for (const char* order : {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "pp-dp-tp"}) {
          Topology t = Topology::from_model_parallel(world, pp, tp, order);
          EXPECT_EQ(t.dp() * t.pp() * t.tp(), world);
          for (int64_t r = 0; r < world; ++r) {
            EXPECT_EQ(t.rank_of(t.coord_of(r)), r) << order;
            for (Axis a : {Axis::dp, Axis::pp, Axis::tp}) {
              auto g = t.group(a, r);
              EXPECT_EQ(static_cast<int64_t>(g.size()), t.size(a));
              EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
            }
          }
          // Each axis partitions the world.
          for (Axis a : {Axis::dp, Axis::pp, Axis::tp}) {
            std::vector<int> count(world, 0);
            for (const auto& g : t.groups(a))
              for (int64_t r : g) ++count[r];
            for (int c : count) EXPECT_EQ(c, 1);
          }
        }
}

TEST(Topology, TensorParallelIsFastestByDefault) {
  // 8 ranks, TP 4: a TP group is 4 consecutive ranks (one node of 4 GPUs).
  Topology t = Topology::from_model_parallel(8, 1, 4);
  EXPECT_EQ(t.groups(Axis::tp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(t.groups(Axis::dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(Topology, OtherOrders) {
  // Megatron's "tp-pp-dp": pipeline varies before data parallel.
  Topology t = Topology::create(8, 2, 2, 2, "tp-pp-dp");
  EXPECT_EQ(t.groups(Axis::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(t.groups(Axis::pp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(t.groups(Axis::dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  Topology u = Topology::create(4, 4, 1, 1, "dp-tp-pp");
  EXPECT_EQ(u.groups(Axis::dp), (Groups{{0, 1, 2, 3}}));
}

TEST(Topology, SmallWorlds) {
  Topology one = Topology::create(1, 1, 1, 1);
  EXPECT_EQ(one.groups(Axis::dp), (Groups{{0}}));
  Topology two = Topology::from_model_parallel(2, 2, 1);
  EXPECT_EQ(two.groups(Axis::pp), (Groups{{0, 1}}));
  EXPECT_EQ(two.groups(Axis::dp), (Groups{{0}, {1}}));
  Topology four = Topology::create(4, 2, 1, 2);
  EXPECT_EQ(four.groups(Axis::tp), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(four.groups(Axis::dp), (Groups{{0, 2}, {1, 3}}));
}

TEST(Topology, WrongProductNamesEveryFactor) {
  try {
    Topology::create(12, 2, 4, 2);
    FAIL();
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("world size 12 != data parallel 2 x pipeline parallel 4 x tensor parallel 2 = 16"),
              std::string::npos) << e.what();
  }
  try {
    Topology::from_model_parallel(6, 4, 1);
    FAIL();
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("world size 6 is not a multiple of pipeline parallel 4 x tensor parallel 1"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(Topology::create(4, 4, 1, 1, "tp-dp"), stratum::Error);
  EXPECT_THROW(Topology::create(4, 4, 1, 1, "tp-dp-xx"), stratum::Error);
  EXPECT_THROW(Topology::create(4, 4, 1, 1, "tp-dp-dp"), stratum::Error);
}

TEST(Topology, TableListsEveryRank) {
  Topology t = Topology::create(4, 2, 1, 2);
  std::string s = t.table();
  EXPECT_NE(s.find("world 4 = dp 2 x pp 1 x tp 2"), std::string::npos) << s;
  EXPECT_NE(s.find("[0, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("[2, 3]"), std::string::npos) << s;
  // Where each rank runs, when known: host and GPU columns.
  s = t.table({{"node-a", 0}, {"node-a", 1}, {"node-b", 0}, {"node-b", -1}});
  EXPECT_NE(s.find("rank  host    gpu  dp  pp  tp"), std::string::npos) << s;
  EXPECT_NE(s.find("     2  node-b    0   1   0   0"), std::string::npos) << s;
  EXPECT_NE(s.find("     3  node-b    -   1   0   1"), std::string::npos) << s;
}
