// ProcessGrid on the ranks mpirun gives (CTest: 1, 2, 4 and 8): for every
// shape that fits, each rank's coordinates, and every communicator holding
// the topology's group in its order, checked by an all-reduce of the world
// ranks over it; and a shape that does not fit refused with the same
// ConfigError on every rank. Tensors of two elements: fast at 8 ranks on 2 cores.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "distributed_test_context.h"
#include "stratum/config/config.h"
#include "stratum/distributed/communicator.h"
#include "stratum/distributed/process_grid.h"

using namespace stratum;
using namespace stratum::distributed;

namespace {

struct Shape {
  int64_t pp, tp;
  std::string order;
  int zero_stage;
};

std::string name_of(const Shape& s) {
  return "pp " + std::to_string(s.pp) + " tp " + std::to_string(s.tp) + " " + s.order + " zero " +
         std::to_string(s.zero_stage);
}

Config config_of(const Shape& s) {
  std::string json = R"({"train_micro_batch_size_per_gpu": 1, "pipeline": {"stages": )" + std::to_string(s.pp) + "}";
  if (s.tp > 1) json += R"(, "tensor_parallel": {"autotp_size": )" + std::to_string(s.tp) + "}";
  json += R"(, "topology": {"order": ")" + s.order + R"("}, "zero_optimization": {"stage": )" +
          std::to_string(s.zero_stage) + "}}";
  return Config::from_string(json, "grid.json");
}

// Every (pp, tp) of powers of two that divides `world`: all of them in the
// default order (both tied variants where there are stages), the full 3D
// shape in every order.
std::vector<Shape> shapes(int64_t world) {
  std::vector<Shape> out;
  for (int64_t pp = 1; pp <= world; pp *= 2)
    for (int64_t tp = 1; pp * tp <= world; tp *= 2) {
      out.push_back({pp, tp, "tp-dp-pp", 0});
      if (pp > 1) out.push_back({pp, tp, "tp-dp-pp", 1});
      if (pp > 1 && tp > 1 && pp * tp < world)
        for (const char* order : {"tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-dp-tp", "pp-tp-dp"})
          out.push_back({pp, tp, order, 2});
    }
  return out;
}

// `comm` holds `want` (world ranks, by group rank) and an all-reduce over it
// sums exactly their ranks. Collective over `comm`.
void expect_group(const std::shared_ptr<Communicator>& comm, const std::vector<int64_t>& want, int64_t me,
                  c10::Device device, const std::string& what) {
  ASSERT_NE(comm, nullptr) << what;
  EXPECT_EQ(comm->global_ranks(), want) << what;
  EXPECT_EQ(comm->rank(), std::find(want.begin(), want.end(), me) - want.begin()) << what;
  at::Tensor t = at::empty({2}, at::kLong);
  t[0] = me;
  t[1] = 1;
  t = t.to(device);
  comm->all_reduce(t, ReduceOp::sum)->wait();
  t = t.cpu();
  EXPECT_EQ(t[0].item<int64_t>(), std::accumulate(want.begin(), want.end(), int64_t{0})) << what << ": sum of ranks";
  EXPECT_EQ(t[1].item<int64_t>(), static_cast<int64_t>(want.size())) << what << ": members";
}

// The group of `groups` that holds `rank`.
std::vector<int64_t> holding(const ProcessGrid::Groups& groups, int64_t rank) {
  for (const auto& g : groups)
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  return {};
}

// The message's hash is the same on every rank of `world`.
bool same_everywhere(const std::string& message, Communicator& world) {
  const int64_t h = static_cast<int64_t>(std::hash<std::string>{}(message) >> 1);
  at::Tensor lo = at::full({1}, h, at::kLong), hi = lo.clone();
  world.all_reduce(lo, ReduceOp::min)->wait();
  world.all_reduce(hi, ReduceOp::max)->wait();
  return lo.item<int64_t>() == h && hi.item<int64_t>() == h;
}

}  // namespace

TEST(ProcessGridRanks, EveryFittingShape) {
  const DistContext& ctx = test::context();
  const int64_t n = ctx.world_size, me = ctx.rank;
  const c10::Device device = ctx.device(), cpu(c10::kCPU);
  for (const Shape& s : shapes(n)) {
    const std::string what = std::to_string(n) + " ranks, " + name_of(s);
    const ProcessGrid grid = ProcessGrid::create(config_of(s), ctx);
    const Topology t = Topology::from_model_parallel(n, s.pp, s.tp, s.order);

    EXPECT_EQ(grid.rank(), me) << what;
    EXPECT_EQ(grid.coord(), t.coord_of(me)) << what;
    EXPECT_EQ(grid.world_size(), n) << what;
    EXPECT_EQ(grid.dp(), n / (s.pp * s.tp)) << what;
    EXPECT_EQ(grid.pp(), s.pp) << what;
    EXPECT_EQ(grid.tp(), s.tp) << what;
    EXPECT_EQ(grid.topology().order(), s.order) << what;
    EXPECT_EQ(grid.is_first_stage(), t.coord_of(me).pp == 0) << what;
    EXPECT_EQ(grid.is_last_stage(), t.coord_of(me).pp == s.pp - 1) << what;
    EXPECT_EQ(grid.fewest_ranks_per_node(), ctx.local_world_size) << what;  // one node under mpirun here
    EXPECT_EQ(grid.summary(), ProcessGrid::summary(t)) << what;

    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), int64_t{0});
    expect_group(grid.world(), all, me, device, what + ", world");
    expect_group(grid.dp_group(), t.group(Axis::dp, me), me, device, what + ", dp");
    expect_group(grid.pp_group(), t.group(Axis::pp, me), me, device, what + ", pp");
    expect_group(grid.tp_group(), t.group(Axis::tp, me), me, device, what + ", tp");
    expect_group(grid.dp_tp_group(), t.dp_tp_group(me), me, device, what + ", dp_tp");

    EXPECT_STREQ(grid.cpu_world()->backend(), "mpi") << what;
    if (grid.world().get() == grid.cpu_world().get()) {  // CPU training: the twins are the device groups
      EXPECT_EQ(grid.cpu_dp_group().get(), grid.dp_group().get()) << what;
      EXPECT_EQ(grid.cpu_pp_group().get(), grid.pp_group().get()) << what;
      EXPECT_EQ(grid.cpu_tp_group().get(), grid.tp_group().get()) << what;
    } else {
      EXPECT_NE(grid.cpu_dp_group().get(), grid.dp_group().get()) << what;
    }
    expect_group(grid.cpu_dp_group(), t.group(Axis::dp, me), me, cpu, what + ", cpu dp");
    expect_group(grid.cpu_pp_group(), t.group(Axis::pp, me), me, cpu, what + ", cpu pp");
    expect_group(grid.cpu_tp_group(), t.group(Axis::tp, me), me, cpu, what + ", cpu tp");
    for (const auto& c : {grid.cpu_dp_group(), grid.cpu_pp_group(), grid.cpu_tp_group()})
      EXPECT_STREQ(c->backend(), "mpi") << what;

    // Leaders: exactly the ranks of data-parallel index 0, by (pp, tp).
    if (t.coord_of(me).dp == 0) {
      expect_group(grid.leaders(), ProcessGrid::leader_groups(t)[0], me, cpu, what + ", leaders");
      if (grid.leaders()) {
        const Coord c = t.coord_of(me);
        EXPECT_EQ(grid.leaders()->rank(), c.pp * s.tp + c.tp) << what;
        EXPECT_STREQ(grid.leaders()->backend(), "mpi") << what;
      }
    } else {
      EXPECT_EQ(grid.leaders(), nullptr) << what;
    }

    // Tied: built for the configured ZeRO stage only, and only with stages.
    const bool whole = s.zero_stage == 0;
    if (s.pp > 1) {
      expect_group(grid.tied(whole), holding(ProcessGrid::tied_groups(t, whole), me), me, device, what + ", tied");
      std::string e;
      try {
        grid.tied(!whole);
      } catch (const Error& error) {
        e = error.what();
      }
      EXPECT_NE(e.find("as zero_optimization.stage " + std::to_string(s.zero_stage) + " needs"), std::string::npos)
          << what << ": " << e;
    } else {
      EXPECT_EQ(grid.tied(whole), nullptr) << what;
      EXPECT_EQ(grid.tied(!whole), nullptr) << what;
    }
  }
}

TEST(ProcessGridRanks, BadShapeRefusedAlikeOnEveryRank) {
  const DistContext& ctx = test::context();
  const int64_t n = ctx.world_size;
  auto refusal = [&](const Config& config, const DistContext& context) {
    try {
      ProcessGrid::create(config, context);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };

  // Three stages divide none of 1, 2, 4, 8 ranks.
  const std::string stages = refusal(config_of({3, 1, "tp-dp-pp", 0}), ctx);
  EXPECT_EQ(stages, "grid.json: 1 problem\n  pipeline.stages: 3 stages do not divide the " + std::to_string(n) +
                        " ranks of the job; use a divisor of " + std::to_string(n));
  EXPECT_TRUE(same_everywhere(stages, *ctx.cpu_world));

  // One rank says its node runs it alone: every rank learns the fewest is 1,
  // so a TP group of 2 would span nodes everywhere.
  DistContext one_alone = ctx;
  if (ctx.rank == 0) one_alone.local_world_size = 1;
  const std::string nodes = refusal(config_of({1, 2, "tp-dp-pp", 0}), one_alone);
  if (n == 1)
    EXPECT_NE(nodes.find("tensor_parallel.autotp_size: 2 does not divide the 1 ranks of the job"), std::string::npos)
        << nodes;
  else
    EXPECT_NE(nodes.find("tensor_parallel.autotp_size: 2 does not divide the 1 ranks of a node (the fewest any node "
                         "of the " + std::to_string(n) + "-rank job runs)"),
              std::string::npos)
        << nodes;
  EXPECT_TRUE(same_everywhere(nodes, *ctx.cpu_world));

  // After a refusal every rank is still in step: a grid that fits builds.
  const ProcessGrid grid = ProcessGrid::create(config_of({1, 1, "tp-dp-pp", 0}), ctx);
  EXPECT_EQ(grid.dp(), n);
}
