#include "stratum/checkpoint/shard_place.h"

namespace stratum {

ShardPlace shard_place(EngineCore& e, const PipelinePlace* place) {
  ShardPlace sp;
  sp.dp_rank = e.dp()->rank();
  sp.dp = e.dp()->size();
  if (place) {
    sp.stage = place->stage;
    sp.stages = place->stages;
    sp.world = place->world.get();
    sp.leaders = place->leaders.get();
    sp.elsewhere = place->written_elsewhere;
    sp.model_params = &place->model_params;
    sp.layer_stages = place->layer_stages;
  }
  const auto& mp = e.model_parallel();
  if (mp && mp->tensor_parallel) {
    sp.tp = static_cast<int>(mp->tensor_parallel->size());
    sp.tp_rank = static_cast<int>(mp->tp_rank);
    sp.specs = &mp->tp_specs;
    if (!place) {  // a pipeline's place names the job and every part's first rank itself
      sp.world = mp->world.get();
      sp.leaders = mp->tp_leaders.get();
    }
  }
  if (mp && mp->expert_parallel) {
    sp.ep = static_cast<int>(mp->expert_parallel->size());
    sp.ep_rank = static_cast<int>(mp->expert_parallel->rank());
    sp.world = mp->world.get();
    sp.leaders = mp->tp_leaders.get();
    // The other ranks' experts: in the checkpoint, not in this rank's model.
    sp.model_params = &mp->model_params;
  }
  // A replicated parameter (or a piece several ranks share, a parameter
  // outside the experts) is written by its first holder.
  if (mp && (mp->tensor_parallel || mp->expert_parallel))
    for (int p : mp->tp_duplicates) sp.elsewhere.insert(e.strategy().layout().specs()[static_cast<size_t>(p)].name);
  return sp;
}

}  // namespace stratum
