#include "stratum/engine/tensor_parallel_setup.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <map>

#include "stratum/core/error.h"
#include "stratum/distributed/logged_communicator.h"
#include "stratum/engine/engine.h"

namespace stratum {

nn::tp::TensorParallel tensor_parallel_group(const Config& config, const distributed::ProcessGrid& grid) {
  engine_detail::check_grid(config, grid);
  if (config.tensor_parallel.size <= 1) return {};
  // comms_logger: the model's own collectives are rows of the job's summary too.
  return {distributed::with_comms_logger(grid.tp_group(), grid.cpu_tp_group(), config.comms_logger, grid.comms_log()),
          config.tensor_parallel.sequence_parallel};
}

nn::tp::TensorParallel tensor_parallel_group(const Config& config, const distributed::DistContext& ctx) {
  if (config.tensor_parallel.size <= 1) return {};
  // The group outlives the grid: it holds its communicator.
  return tensor_parallel_group(config, distributed::ProcessGrid::create(config, ctx));
}

TensorParallelGradPlan plan_tensor_parallel_grads(const nn::tp::ShardedModule& model,
                                                  const std::vector<std::string>& names, int64_t size, int64_t rank,
                                                  bool sequence_parallel) {
  TensorParallelGradPlan plan;
  std::map<std::vector<std::vector<int64_t>>, size_t> partial_of;  // groups -> index into plan.partial
  auto add_partial = [&](const std::vector<std::vector<int64_t>>& groups, int param) {
    auto [it, fresh] = partial_of.emplace(groups, plan.partial.size());
    if (fresh) plan.partial.push_back({groups, {}});
    plan.partial[it->second].params.push_back(param);
  };
  std::vector<int64_t> all(size);
  for (int64_t r = 0; r < size; ++r) all[r] = r;
  for (size_t i = 0; i < names.size(); ++i) {
    const int p = static_cast<int>(i);
    const auto spec = model.shard_spec(names[i], rank);
    if (!spec) {  // replicated: the same gradient everywhere, or (sequence parallel) a part on each rank
      if (sequence_parallel) add_partial({all}, p);
      if (rank != 0) plan.duplicates.push_back(p);
      continue;
    }
    if (spec->parts <= 0 || size % spec->parts != 0)
      throw Error("tensor parallel: parameter '" + names[i] + "' is cut into " + std::to_string(spec->parts) +
                  " pieces, which does not divide the group of " + std::to_string(size));
    if (spec->parts == size) continue;  // split: each rank's piece is its own
    // A piece several ranks hold: those holding the same index sum their parts.
    std::map<int64_t, std::vector<int64_t>> holders;
    for (int64_t r = 0; r < size; ++r) {
      const auto other = model.shard_spec(names[i], r);
      if (!other || other->parts != spec->parts)
        throw Error("tensor parallel: parameter '" + names[i] + "' is cut differently on ranks " +
                    std::to_string(rank) + " and " + std::to_string(r) + " of its group");
      holders[other->index].push_back(r);
    }
    std::vector<std::vector<int64_t>> groups;
    for (auto& [index, ranks] : holders) groups.push_back(std::move(ranks));
    std::sort(groups.begin(), groups.end());
    add_partial(groups, p);
    for (const auto& g : groups)
      if (std::find(g.begin(), g.end(), rank) != g.end() && g.front() != rank) plan.duplicates.push_back(p);
  }
  std::sort(plan.duplicates.begin(), plan.duplicates.end());
  return plan;
}

namespace engine_detail {

int64_t tensor_parallel_size(torch::nn::Module& module) {
  const auto* sharded = dynamic_cast<const nn::tp::ShardedModule*>(&module);
  return sharded ? sharded->tensor_parallel().size() : 1;
}

const nn::tp::ShardedModule& sharded_as_configured(const Config& config, torch::nn::Module& module,
                                                   int64_t grid_rank, int64_t grid_tp_rank) {
  const auto* sharded = dynamic_cast<const nn::tp::ShardedModule*>(&module);
  const int64_t t = config.tensor_parallel.size;
  const int64_t model_size = sharded ? sharded->tensor_parallel().size() : 1;
  if (model_size != t)
    throw ConfigError(config.source, {"tensor_parallel.autotp_size: " + std::to_string(t) +
                                      " but the model is " + (model_size > 1 ? "sharded over " + std::to_string(model_size) +
                                                                                 " ranks" : "not tensor-parallel") +
                                      "; build it over stratum::tensor_parallel_group(config, context) "
                                      "(models::build_model(model_config, device, group))"});
  if (sharded->tensor_parallel().sequence_parallel != config.tensor_parallel.sequence_parallel)
    throw ConfigError(config.source, {std::string("tensor_parallel.sequence_parallel: ") +
                                      (config.tensor_parallel.sequence_parallel ? "true" : "false") +
                                      " but the model was built with it " +
                                      (sharded->tensor_parallel().sequence_parallel ? "on" : "off")});
  if (sharded->tensor_parallel().rank() != grid_tp_rank)
    throw Error("tensor parallel: rank " + std::to_string(grid_rank) + " is tensor-parallel rank " +
                std::to_string(grid_tp_rank) + " of the grid but rank " +
                std::to_string(sharded->tensor_parallel().rank()) +
                " of the model's group; build the model over stratum::tensor_parallel_group(config, context)");
  return *sharded;
}

void add_tensor_parallel(ModelParallelPlace& place, const nn::tp::ShardedModule& model,
                         const std::vector<std::string>& names) {
  const nn::tp::TensorParallel& tp = model.tensor_parallel();
  const TensorParallelGradPlan plan = plan_tensor_parallel_grads(model, names, tp.size(), tp.rank(), tp.sequence_parallel);
  place.tensor_parallel = tp.group;
  place.tp_duplicates = plan.duplicates;
  // Not the grid's: these groups follow the model (which ranks share a
  // key/value head), so they are split here, from the model's tp group.
  for (const auto& partial : plan.partial)  // the same list on every rank of the group: the splits match
    place.partial.push_back(
        {partial.groups.size() == 1 ? tp.group : tp.group->split(partial.groups, "tp_shared"), partial.params});
  place.tp_rank = tp.rank();
  for (const std::string& name : names) place.tp_specs.push_back(model.shard_spec(name, tp.rank()));
}

TensorParallelEngineGroups tensor_parallel_engine_groups(const Config& config, torch::nn::Module& module,
                                                         const distributed::ProcessGrid& grid) {
  const nn::tp::ShardedModule& sharded = sharded_as_configured(config, module, grid.rank(), grid.coord().tp);
  TensorParallelEngineGroups out;
  out.dp = grid.dp_group();
  out.dp_control = grid.cpu_dp_group();
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  trainable_parameters(module, params, names);
  add_tensor_parallel(out.place, sharded, names);
  out.place.world = grid.world();
  out.place.tp_leaders = grid.leaders();  // at pp = 1: the tp ranks of dp 0, in tp order
  return out;
}

}  // namespace engine_detail
}  // namespace stratum
