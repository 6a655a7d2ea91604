#include "stratum/distributed/parallel_groups.h"

#include "stratum/core/log.h"

namespace stratum::distributed {

ParallelGroups make_parallel_groups(const Topology& topology, const std::shared_ptr<Communicator>& world) {
  if (world->size() != topology.world_size())
    throw Error("parallel groups: the " + std::string(world->backend()) + " world has " +
                std::to_string(world->size()) + " ranks but the topology has " +
                std::to_string(topology.world_size()) + " (dp " + std::to_string(topology.dp()) + " x pp " +
                std::to_string(topology.pp()) + " x tp " + std::to_string(topology.tp()) + ")");
  // Every job states its grid once, at start, so a user can check placement.
  if (world->rank() == 0) log::info(topology.table());
  ParallelGroups g;
  g.world = world;
  g.dp = world->split(topology.groups(Axis::dp), "dp");
  g.pp = world->split(topology.groups(Axis::pp), "pp");
  g.tp = world->split(topology.groups(Axis::tp), "tp");
  g.dp_tp = world->split(topology.dp_tp_groups(), "dp_tp");
  return g;
}

}  // namespace stratum::distributed
