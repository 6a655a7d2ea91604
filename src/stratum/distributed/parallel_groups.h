#pragma once
// One communicator per parallel axis of a Topology, split from any world
// communicator (a logged one, a test's backend). The job's own groups come
// from ProcessGrid (process_grid.h), which engines and programs take theirs
// from; rank_places says where each rank of the job runs.
#include <memory>
#include <vector>

#include "stratum/distributed/communicator.h"
#include "stratum/distributed/topology.h"

namespace stratum::distributed {

struct ParallelGroups {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> dp;
  std::shared_ptr<Communicator> pp;
  std::shared_ptr<Communicator> tp;
  std::shared_ptr<Communicator> dp_tp;
};

// Collective over `world`, whose size must equal the topology's world size.
// Rank 0 logs the rank-to-group table (debug level: the apps print it with hosts).
ParallelGroups make_parallel_groups(const Topology& topology, const std::shared_ptr<Communicator>& world);

// Where every rank of `cpu_world` runs: its host name and GPU (-1: none).
// Collective over `cpu_world` (an MPI communicator).
std::vector<Topology::Place> rank_places(Communicator& cpu_world, int cuda_device);

}  // namespace stratum::distributed
