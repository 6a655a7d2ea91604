#pragma once
// What the engine equivalence tests share: data-parallel groups of k ranks cut
// from the world (one job checks DP = 1, 2 and 4 side by side), a DistContext
// over such a group, and the relative difference they compare with.
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../distributed/distributed_test_context.h"

namespace stratum::test {

inline std::shared_ptr<distributed::Communicator> groups_of(int k, std::shared_ptr<distributed::Communicator> world = nullptr) {
  if (!world) world = context().cpu_world;
  std::vector<std::vector<int64_t>> groups(world->size() / k);
  for (int r = 0; r < world->size(); ++r) groups[r / k].push_back(r);
  return world->split(groups, "dp" + std::to_string(k));
}

// A DistContext over `world` (a group of the job's ranks), on the CPU.
inline distributed::DistContext sub_context(const std::shared_ptr<distributed::Communicator>& world) {
  distributed::DistContext ctx = context();
  ctx.cpu_world = world;
  ctx.gpu_world = nullptr;
  ctx.rank = world->rank();
  ctx.world_size = world->size();
  ctx.cuda_device = -1;
  return ctx;
}

// max |a - b| / max |b|
inline double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

}  // namespace stratum::test
