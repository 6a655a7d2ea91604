#pragma once
// Where this rank's shard of a checkpoint sits among the job's: one
// definition for saving and loading. A shard is indexed by (pipeline stage,
// tensor-parallel index, expert-parallel index, data-parallel rank),
// stage-major: ((stage x tp + tp rank) x ep + ep rank) x dp + dp rank, dp the
// core's group (under expert parallelism, the experts' data-parallel ranks);
// the place comes from a pipeline's stage (engine/pipeline_stages.h), or the
// core's tensor or expert parallelism, or neither (the data-parallel group is the job).
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stratum/engine/engine_core.h"
#include "stratum/engine/pipeline_stages.h"

namespace stratum {

struct ShardPlace {
  int stage = 0, stages = 1, tp_rank = 0, tp = 1, ep_rank = 0, ep = 1, dp_rank = 0, dp = 1;
  distributed::Communicator* world = nullptr;    // the job's ranks; null: the data-parallel group
  distributed::Communicator* leaders = nullptr;  // on data-parallel rank 0 of several parts
  std::set<std::string> elsewhere;               // parameters another rank writes
  const std::vector<std::string>* model_params = nullptr;  // the whole model's (one stage holds some)
  std::vector<int> layer_stages;
  const std::vector<std::optional<nn::tp::ShardSpec>>* specs = nullptr;  // per layout parameter

  // The shard of data-parallel rank `dp_rank_of` in this rank's (stage, tp index).
  int shard(int dp_rank_of) const { return ((stage * tp + tp_rank) * ep + ep_rank) * dp + dp_rank_of; }
  bool several_parts() const { return stages * tp * ep > 1; }
  // Writes the manifest, publishes.
  bool leader() const { return dp_rank == 0 && stage == 0 && tp_rank == 0 && ep_rank == 0; }
  std::optional<nn::tp::ShardSpec> spec(size_t param) const {
    return specs && param < specs->size() ? (*specs)[param] : std::nullopt;
  }
};

// This rank's place, from the engine's core and its pipeline stage (null: none).
ShardPlace shard_place(EngineCore& engine, const PipelinePlace* place);

}  // namespace stratum
