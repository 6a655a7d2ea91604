#pragma once
// The job's process grid: this rank's (dp, pp, tp) coordinates and every
// communicator the layouts need, built once from the config and validated
// once, identically on every rank. Engines and programs take their groups
// from here rather than each building a Topology and splitting the world.
//
// Torch-free on purpose (communicators are forward-declared), so that
// `stratum-config check` can call problems() without ATen's headers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stratum/distributed/topology.h"

namespace stratum {
struct Config;
}

namespace stratum::distributed {

class Communicator;
class CommsLog;
struct DistContext;

class ProcessGrid {
 public:
  using Groups = std::vector<std::vector<int64_t>>;

  // Every problem with the grid's shape for a job of `world_size` ranks whose
  // smallest node runs `fewest_ranks_per_node` of them (pass world_size when
  // nodes are unknown: the node checks are then skipped). Each names its key,
  // the numbers and what to use instead. Pure: the same answer on every rank.
  // Left to others: what config/ checks already (topology.order naming tp, dp
  // and pp once each, sequence parallelism without TP) and the rules across
  // schedule and ZeRO. The node checks assume ranks fill nodes in order, as
  // stratum-run and mpirun's default mapping place them.
  static std::vector<std::string> problems(const Config& config, int world_size, int fewest_ranks_per_node);

  // Collective over ctx.cpu_world and ctx.device_world(); every rank calls it
  // with the same config. Agrees on the fewest ranks of a node (a min over the
  // ranks' local_world_size), throws ConfigError(config.source, problems)
  // identically on every rank when problems() finds any, then builds the
  // Topology (pipeline.stages x tensor_parallel size, topology.order) and
  // splits every group below.
  static ProcessGrid create(const Config& config, const DistContext& ctx);

  // --- pure helpers (no ranks needed) ---------------------------------------
  // The partition the leaders' communicator is split by: first the ranks of
  // data-parallel index 0 ordered by (pp, tp), then every other rank alone.
  // With expert parallelism over `ep` ranks, data-parallel indices below ep
  // (the first rank of each expert index's data-parallel group), ordered by
  // (pp, tp, dp).
  static Groups leader_groups(const Topology& topology, int64_t ep = 1);
  // The partition the tied embedding's communicator is split by. Whole
  // gradients (ZeRO-0: every data-parallel rank holds all of them): the ranks
  // of stage 0 and stage p-1 of one (dp, tp) index, in stage order. Otherwise
  // (each stage partitions its gradients over its data-parallel ranks, each
  // stage differently): all stage-0 and stage-(p-1) ranks of one tp index,
  // by rank. Every group's first rank holds stage 0; every rank of the
  // stages between is alone; at pp = 1 every rank is alone.
  // With expert parallelism over `ep` ranks, the partitioned variant groups
  // one expert index's ranks only (dp % ep): the others hold the same pieces.
  static Groups tied_groups(const Topology& topology, bool whole_gradients, int64_t ep = 1);
  // Expert parallelism is cut from data parallelism: each data-parallel group
  // (ordered by dp index) into consecutive blocks of `ep` ranks, the experts'
  // groups; and across those blocks, the ranks of one place in them, the
  // expert parameters' data-parallel groups (size dp / ep).
  static Groups expert_groups(const Topology& topology, int64_t ep);
  static Groups expert_data_groups(const Topology& topology, int64_t ep);
  // Context parallelism is cut from data parallelism as expert parallelism
  // is: its groups are expert_groups(topology, cp), its Ulysses groups
  // expert_groups(topology, ulysses) (consecutive ranks inside them), and
  // its ring groups the ranks of one Ulysses index inside each.
  static Groups context_ring_groups(const Topology& topology, int64_t cp, int64_t ulysses);
  // "8 ranks: 2 data-parallel x 2 pipeline stages x 2 tensor-parallel, order tp-dp-pp".
  static std::string summary(const Topology& topology);

  // --- this rank in the grid ------------------------------------------------
  const Topology& topology() const { return topology_; }
  Coord coord() const { return coord_; }
  int64_t rank() const { return rank_; }  // in the device world (the same as in the CPU world)
  int64_t world_size() const { return topology_.world_size(); }
  int64_t dp() const { return topology_.dp(); }
  int64_t pp() const { return topology_.pp(); }
  int64_t tp() const { return topology_.tp(); }
  int64_t ep() const { return ep_size_; }  // moe.expert_parallel_size: divides dp()
  int64_t cp() const { return cp_size_; }  // context_parallel.size: divides dp()
  // The data-parallel ranks that read batches of their own (a context-parallel
  // group reads one batch, each rank its part of the sequence), and this rank's index among them.
  int64_t data_replicas() const { return dp() / cp_size_; }
  int64_t data_replica() const { return coord_.dp / cp_size_; }
  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == topology_.pp() - 1; }
  // The fewest ranks any node of the job runs, as the ranks agreed.
  int fewest_ranks_per_node() const { return fewest_ranks_per_node_; }
  // The GPU this rank trains on (DistContext::device()), -1: the CPU. Kept
  // here so that an engine given the grid needs nothing else of the context.
  int cuda_device() const { return cuda_device_; }

  // --- communicators: this rank's group along each axis (never null) --------
  // On the training device (NCCL with GPUs, else MPI): for tensors there.
  const std::shared_ptr<Communicator>& world() const { return world_; }
  const std::shared_ptr<Communicator>& dp_group() const { return dp_; }
  const std::shared_ptr<Communicator>& pp_group() const { return pp_; }
  const std::shared_ptr<Communicator>& tp_group() const { return tp_; }
  const std::shared_ptr<Communicator>& dp_tp_group() const { return dp_tp_; }  // the stage's ranks
  // Expert parallelism (ep() > 1; null otherwise): the ranks a layer's experts
  // are split over, and the data-parallel ranks of the same experts.
  const std::shared_ptr<Communicator>& ep_group() const { return ep_; }
  const std::shared_ptr<Communicator>& expert_dp_group() const { return edp_; }
  const std::shared_ptr<Communicator>& cpu_expert_dp_group() const { return cpu_edp_; }
  // Context parallelism (cp() > 1; null otherwise): the ranks one sequence
  // is split over, its Ulysses groups and its ring groups (null where the
  // method has no such part; the whole group where it is the only one).
  const std::shared_ptr<Communicator>& cp_group() const { return cp_; }
  const std::shared_ptr<Communicator>& cp_ulysses_group() const { return cp_ulysses_; }
  const std::shared_ptr<Communicator>& cp_ring_group() const { return cp_ring_; }
  // Their CPU (MPI) twins, for control messages and host tensors: the same
  // objects as the device ones when the device world is the CPU world.
  const std::shared_ptr<Communicator>& cpu_world() const { return cpu_world_; }
  const std::shared_ptr<Communicator>& cpu_dp_group() const { return cpu_dp_; }
  const std::shared_ptr<Communicator>& cpu_pp_group() const { return cpu_pp_; }
  const std::shared_ptr<Communicator>& cpu_tp_group() const { return cpu_tp_; }

  // CPU communicator of every (stage, tp index) of data-parallel index 0,
  // ranked by (pp, tp): who writes and gathers the parts of a checkpoint
  // (at pp = 1 the tp ranks of dp 0, at tp = 1 the stages of dp 0; with
  // expert parallelism, data-parallel indices 0 to ep - 1). Null on the
  // other ranks.
  const std::shared_ptr<Communicator>& leaders() const { return leaders_; }

  // Device communicator over which the tied embedding's gradient is summed
  // (tied_groups: a middle stage's rank gets its group of one). Built at
  // create() when pp > 1, for the variant zero_optimization.stage needs
  // (whole gradients at stage 0) rather than both: a split is collective, so
  // it cannot wait for the first call, and an unused NCCL communicator costs
  // a stream, a thread and device memory. Throws Error when `whole_gradients`
  // is not that variant; null at pp = 1.
  const std::shared_ptr<Communicator>& tied(bool whole_gradients) const;

  // With the comms_logger section on (enabled or debug): the one log every
  // group's logger records into (data-parallel, pipeline, tensor-parallel
  // rows in one summary); null when it is off.
  const std::shared_ptr<CommsLog>& comms_log() const { return comms_log_; }

  // Topology::table: one line per rank, with hosts and GPUs when given.
  std::string table(const std::vector<Topology::Place>& places = {}) const { return topology_.table(places); }
  std::string summary() const {
    return summary(topology_) +
           (ep_size_ > 1 ? ", experts over " + std::to_string(ep_size_) + " of the data-parallel ranks" : "") +
           (cp_size_ > 1 ? ", each sequence over " + std::to_string(cp_size_) + " of the data-parallel ranks" : "");
  }

 private:
  ProcessGrid(Topology topology, int64_t rank, int fewest_ranks_per_node, int zero_stage);

  // Expert and context parallelism are carved from dp.
  Topology topology_;
  int64_t ep_size_ = 1, cp_size_ = 1;
  Coord coord_;
  int64_t rank_ = 0;
  int fewest_ranks_per_node_ = 1;
  int zero_stage_ = 0;  // what the tied group was built for
  int cuda_device_ = -1;
  std::shared_ptr<Communicator> world_, dp_, pp_, tp_, dp_tp_, ep_, edp_, cpu_edp_, cp_, cp_ulysses_, cp_ring_;
  std::shared_ptr<Communicator> cpu_world_, cpu_dp_, cpu_pp_, cpu_tp_;
  std::shared_ptr<Communicator> leaders_, tied_;
  std::shared_ptr<CommsLog> comms_log_;
};

}  // namespace stratum::distributed
