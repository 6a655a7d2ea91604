#include "stratum/distributed/parallel_groups.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstring>

#include "stratum/core/log.h"

namespace stratum::distributed {

ParallelGroups make_parallel_groups(const Topology& topology, const std::shared_ptr<Communicator>& world) {
  if (world->size() != topology.world_size())
    throw Error("parallel groups: the " + std::string(world->backend()) + " world has " +
                std::to_string(world->size()) + " ranks but the topology has " +
                std::to_string(topology.world_size()) + " (dp " + std::to_string(topology.dp()) + " x pp " +
                std::to_string(topology.pp()) + " x tp " + std::to_string(topology.tp()) + ")");
  // Every job states its grid once, at start, so a user can check placement.
  if (world->rank() == 0) log::debug(topology.table());
  ParallelGroups g;
  g.world = world;
  g.dp = world->split(topology.groups(Axis::dp), "dp");
  g.pp = world->split(topology.groups(Axis::pp), "pp");
  g.tp = world->split(topology.groups(Axis::tp), "tp");
  g.dp_tp = world->split(topology.dp_tp_groups(), "dp_tp");
  return g;
}

std::vector<Topology::Place> rank_places(Communicator& cpu_world, int cuda_device) {
  constexpr int64_t kHost = 64;  // bytes of a host name kept (gethostname truncates alike)
  const int64_t n = cpu_world.size();
  at::Tensor mine = at::zeros({kHost + 1}, at::kLong);  // the name's bytes, then the GPU
  char host[kHost + 1] = {};
  if (::gethostname(host, kHost) != 0) std::strncpy(host, "?", kHost);
  for (int64_t i = 0; i < kHost; ++i) mine[i] = static_cast<unsigned char>(host[i]);
  mine[kHost] = cuda_device;
  at::Tensor all = at::empty({n * (kHost + 1)}, at::kLong);
  cpu_world.all_gather(all, mine)->wait();
  std::vector<Topology::Place> places;
  const int64_t* v = all.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r) {
    Topology::Place p;
    for (int64_t i = 0; i < kHost && v[r * (kHost + 1) + i] != 0; ++i) p.host += static_cast<char>(v[r * (kHost + 1) + i]);
    p.gpu = static_cast<int>(v[r * (kHost + 1) + kHost]);
    places.push_back(std::move(p));
  }
  return places;
}

}  // namespace stratum::distributed
