#pragma once
// What the engine needs to train a tensor-parallel model (nn::tp::ShardedModule)
// over TP x DP ranks: the process grid's groups, and which gradients the
// step must treat apart (counted once in the norm, or summed over the ranks
// that each computed part of them).
//
//   auto grid = distributed::ProcessGrid::create(config, ctx);
//   auto tp = stratum::tensor_parallel_group(config, grid);
//   auto model = models::build_model(model_config, device, tp);
//   auto engine = stratum::initialize(config, model, grid);  // data parallel over world / tp
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stratum/config/config.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/engine/engine_core.h"
#include "stratum/nn/tensor_parallel/shard_spec.h"

namespace torch::nn {
class Module;
}

namespace stratum {

// This rank's tensor-parallel group for `config`: the grid's (on the training
// device), sequence_parallel as configured. A size of 1: no group (the model
// is built whole). Throws Error when the grid was built for another shape.
nn::tp::TensorParallel tensor_parallel_group(const Config& config, const distributed::ProcessGrid& grid);
// The same over a grid built here (ProcessGrid::create: collective over the
// job, ConfigError on every rank when the shape does not fit, e.g. a group
// that would span nodes); a size of 1 returns no group without communicating.
nn::tp::TensorParallel tensor_parallel_group(const Config& config, const distributed::DistContext& ctx);

// Pure: how the step treats each of `names` (a ShardedModule's trainable
// parameters, the engine's order) at `rank` of `size`.
struct TensorParallelGradPlan {
  // Replicated parameters (or pieces several ranks share) that a lower rank
  // counts in the gradient norm.
  std::vector<int> duplicates;
  // Parameters whose gradient each holder computes a part of, by the groups
  // of ranks that sum them (a partition of 0 .. size-1).
  struct Partial {
    std::vector<std::vector<int64_t>> groups;
    std::vector<int> params;
  };
  std::vector<Partial> partial;
};
TensorParallelGradPlan plan_tensor_parallel_grads(const nn::tp::ShardedModule& model,
                                                  const std::vector<std::string>& names, int64_t size, int64_t rank,
                                                  bool sequence_parallel);

namespace engine_detail {

// The module's ShardedModule group size (1: not sharded).
int64_t tensor_parallel_size(torch::nn::Module& module);

// The module as a ShardedModule over the config's tensor-parallel size, with
// sequence parallelism as configured, at the grid's tensor-parallel rank;
// ConfigError (the same on every rank) naming the key otherwise.
const nn::tp::ShardedModule& sharded_as_configured(const Config& config, torch::nn::Module& module,
                                                   int64_t grid_rank, int64_t grid_tp_rank);

// The core's tensor-parallel part of `place` for parameters `names` (the
// core's, in its order) of `model`: the group, the duplicates, the partial
// sums' groups (collective over the model's group), this rank's specs.
void add_tensor_parallel(ModelParallelPlace& place, const nn::tp::ShardedModule& model,
                         const std::vector<std::string>& names);

// initialize()'s groups for a tensor-parallel model, the grid's: the
// data-parallel group (and its CPU twin for comms_logger.debug), and the
// core's place in the model's group. Throws ConfigError (identically on every
// rank, before any collective) when `module` is not sharded as the config says.
struct TensorParallelEngineGroups {
  std::shared_ptr<distributed::Communicator> dp, dp_control;
  ModelParallelPlace place;
};
TensorParallelEngineGroups tensor_parallel_engine_groups(const Config& config, torch::nn::Module& module,
                                                         const distributed::ProcessGrid& grid);

}  // namespace engine_detail
}  // namespace stratum
