// The parts of initialize() that touch torch::nn::Module (kept out of the
// header-only template so that only this file pulls in the module headers).
#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "stratum/engine/engine.h"
#include "stratum/engine/moe_routing.h"
#include "stratum/nn/segment_runs.h"
#include "stratum/nn/deferred_init.h"
#include "stratum/nn/parameter_modules.h"
#include "stratum/distributed/logged_communicator.h"

namespace stratum::engine_detail {

void trainable_parameters(torch::nn::Module& module, std::vector<at::Tensor>& params, std::vector<std::string>& names) {
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names.push_back(item.key());
    params.push_back(item.value());
  }
}

std::set<std::string> frozen_parameter_names(torch::nn::Module& module, const std::function<bool(size_t)>& layers) {
  std::set<const void*> wanted;
  nn::LayerStackImpl* stack = layers ? as_layer_stack(module) : nullptr;
  if (layers && !stack) throw Error("frozen_parameter_names: the module is not a LayerStack");
  if (stack) {
    for (size_t l = 0; l < stack->size(); ++l) {
      if (!layers(l)) continue;
      std::vector<at::Tensor> ps = stack->layer(l).parameters(/*recurse=*/true);
      for (const at::Tensor& b : stack->layer(l).borrowed_parameters()) ps.push_back(b);
      for (const at::Tensor& p : ps)
        if (!p.requires_grad()) wanted.insert(p.unsafeGetTensorImpl());
    }
  }
  std::set<std::string> names;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (!item.value().requires_grad() && (!stack || wanted.count(item.value().unsafeGetTensorImpl())))
      names.insert(item.key());
  return names;
}

std::unique_ptr<zero::FrozenUnits> partition_frozen_base(torch::nn::Module& model, nn::LayerStackImpl& stack,
                                                         std::shared_ptr<distributed::Communicator> dp,
                                                         c10::Device device, at::ScalarType dtype,
                                                         int64_t prefetch_bytes,
                                                         const std::function<bool(size_t)>& layers) {
  std::unordered_map<const void*, std::string> name_of;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    name_of.emplace(item.value().unsafeGetTensorImpl(), item.key());
  std::set<const void*> borrowed;  // read by two layers: stays whole
  for (size_t l = 0; l < stack.size(); ++l)
    for (const at::Tensor& b : stack.layer(l).borrowed_parameters()) borrowed.insert(b.unsafeGetTensorImpl());
  std::vector<std::vector<zero::FrozenTensors>> units(stack.size());
  std::vector<std::set<std::string>> names(stack.size());
  bool any = false;
  for (size_t l = 0; l < stack.size(); ++l) {
    if (layers && !layers(l)) continue;
    std::set<const void*> apart;
    for (const auto& m : stack.layer(l).modules(/*include_self=*/true)) {
      auto* linear = dynamic_cast<nn::LinearImpl*>(m.get());
      if (!linear || !linear->nf4_base) continue;
      const void* impl = linear->weight.unsafeGetTensorImpl();
      if (borrowed.count(impl)) continue;
      apart.insert(impl);
      const std::string name = name_of.at(impl);
      // The codes, the block scales and their nested scales; the code book is shared and tiny.
      units[l].push_back({name, [linear, name] {
                            if (!linear->nf4) throw Error("ZeRO-3: the NF4 weight '" + name + "' was never drawn");
                            const quant::Nf4Tensor& q = *linear->nf4;
                            std::vector<at::Tensor> held{q.packed, q.absmax};
                            if (q.nested) held.push_back(q.nested_absmax);
                            return held;
                          }});
      names[l].insert(name);
    }
    for (const at::Tensor& p : stack.layer(l).parameters(/*recurse=*/true)) {
      const void* impl = p.unsafeGetTensorImpl();
      if (p.requires_grad() || apart.count(impl) || borrowed.count(impl)) continue;
      const std::string& name = name_of.at(impl);
      units[l].push_back({name, [p] { return std::vector<at::Tensor>{p}; }});
      names[l].insert(name);
    }
    any = any || !units[l].empty();
  }
  if (!any) return nullptr;
  auto frozen = std::make_unique<zero::FrozenUnits>(std::move(units), std::move(dp), device, prefetch_bytes);
  for (size_t l = 0; l < stack.size(); ++l) {
    if (names[l].empty()) continue;
    nn::materialize(model, device, dtype, [&](const std::string& name) { return names[l].count(name) > 0; });
    frozen->partition(l);
  }
  return frozen;
}

void prepare_module(torch::nn::Module& module, c10::Device device, at::ScalarType dtype, bool keep_trainable_params) {
  // Module::to(dtype) would cast integer buffers too; only floating tensors change.
  c10::AutoGradMode no_grad(false);
  auto move = [&](at::Tensor& t) {
    if (!t.defined() || nn::is_unmaterialized(t)) return;  // a skeleton's part drawn later or elsewhere (nn/deferred_init.h)
    const bool cast = at::isFloatingType(t.scalar_type()) && t.scalar_type() != dtype;
    if (t.device() != device || cast) t.set_data(t.to(device, cast ? dtype : t.scalar_type()));
  };
  for (auto& p : module.parameters(/*recurse=*/true))
    if (!keep_trainable_params || !p.requires_grad()) move(p);
  for (auto& b : module.buffers(/*recurse=*/true)) move(b);
}

void attach_moe_routing(EngineCore& core, nn::LayerStackImpl* stack, const std::function<bool(size_t)>& held) {
  if (!stack) return;
  std::vector<nn::moe::SparseMoEImpl*> layers;
  for (size_t l = 0; l < stack->size(); ++l) {
    if (held && !held(l)) continue;
    for (const auto& m : stack->layer(l).modules())
      if (auto* moe = dynamic_cast<nn::moe::SparseMoEImpl*>(m.get())) layers.push_back(moe);
  }
  if (layers.empty() || !layers.front()->record()) return;
  core.attach_step_observer(
      std::make_shared<MoERouting>(layers.front()->record(), std::move(layers), core.data_parallel(), core.device()));
}

void add_expert_parallel(ModelParallelPlace& place, const Config& config, torch::nn::Module& model,
                         const distributed::ProcessGrid& grid, const std::vector<std::string>& core_names) {
  const int64_t ep = grid.ep();
  std::set<const void*> experts;
  int64_t layers = 0, experts_per_layer = 0;
  for (const auto& m : model.modules()) {
    auto* moe = dynamic_cast<nn::moe::SparseMoEImpl*>(m.get());
    if (!moe) continue;
    ++layers;
    if (moe->expert_parallel().size() != ep)
      throw ConfigError(config.source, {"moe.expert_parallel_size: " + std::to_string(ep) + " but the model's "
                                        "experts are split over " + std::to_string(moe->expert_parallel().size()) +
                                        " ranks; build it over the grid's ep_group()"});
    for (const auto& p : moe->experts->parameters()) experts.insert(p.unsafeGetTensorImpl());
    experts_per_layer = moe->options().router.num_experts;
  }
  if (layers == 0)
    throw ConfigError(config.source, {"moe.expert_parallel_size: " + std::to_string(ep) +
                                      " but the model has no mixture-of-experts layer"});
  // The whole model's (every pipeline stage's), and the core's by name.
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  trainable_parameters(model, params, names);
  std::map<std::string, const at::Tensor*> by_name;
  for (size_t i = 0; i < names.size(); ++i) by_name[names[i]] = &params[i];
  place.expert_parallel = grid.ep_group();
  place.data_parallel = grid.dp_group();
  place.world = grid.world();
  place.tp_leaders = grid.leaders();  // the first rank of each (tp index, expert index)'s data-parallel group, in that order
  if (place.tp_specs.empty()) place.tp_specs.resize(core_names.size());
  // The parameters outside the experts: summed over the expert group, written and counted by its first rank.
  ModelParallelPlace::PartialGradients dense{grid.ep_group(), {}};
  std::set<int> duplicates(place.tp_duplicates.begin(), place.tp_duplicates.end());
  for (size_t i = 0; i < core_names.size(); ++i) {
    const auto it = by_name.find(core_names[i]);
    if (it == by_name.end()) throw Error("expert parallelism: the engine's parameter '" + core_names[i] +
                                         "' is not the model's");
    if (experts.count(it->second->unsafeGetTensorImpl())) continue;
    dense.params.push_back(static_cast<int>(i));
    if (grid.ep_group()->rank() != 0) duplicates.insert(static_cast<int>(i));
  }
  place.tp_duplicates.assign(duplicates.begin(), duplicates.end());
  place.partial.push_back(std::move(dense));
  // The whole model's names, for checkpoints: each expert parameter's under every index of its layer.
  std::set<std::string> all(names.begin(), names.end());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!experts.count(params[i].unsafeGetTensorImpl())) continue;
    const std::string& name = names[i];
    const size_t at = name.rfind(".experts.") + 9, dot = name.find('.', at);
    for (int64_t e = 0; e < experts_per_layer; ++e) all.insert(name.substr(0, at) + std::to_string(e) + name.substr(dot));
  }
  place.model_params.assign(all.begin(), all.end());
}

nn::LayerStackImpl* as_layer_stack(torch::nn::Module& module) { return dynamic_cast<nn::LayerStackImpl*>(&module); }

std::shared_ptr<void> install_layer_runner(nn::LayerStackImpl* stack, EngineCore& core, const Config& config) {
  if (!stack) return nullptr;
  zero::LayerParamGatherer* gatherer = core.strategy().gatherer();
  zero::FrozenUnits* frozen = core.frozen_units();
  std::vector<bool> checkpointed = checkpointed_layers(*stack, config.activation_checkpointing);
  if (!gatherer && !frozen && std::find(checkpointed.begin(), checkpointed.end(), true) == checkpointed.end())
    return nullptr;
  stack->set_runner(std::make_shared<EngineLayerRunner>(gatherer, frozen, std::move(checkpointed), config.activation_checkpointing,
                                                        core.dp()->rank() == 0, config.steps_per_print.value_or(10),
                                                        &core.global_steps_ref()));
  // Taken off when the engine goes; the model stays usable at stages 0-2.
  return std::shared_ptr<void>(nullptr, [stack](void*) { stack->set_runner(nullptr); });
}

std::shared_ptr<distributed::Communicator> logged_data_parallel(const Config& config,
                                                                std::shared_ptr<distributed::Communicator> dp,
                                                                std::shared_ptr<distributed::Communicator> control,
                                                                std::shared_ptr<distributed::CommsLog> log) {
  const config::CommsLoggerConfig& cl = config.comms_logger;
  if ((!cl.enabled && !cl.debug) || dynamic_cast<distributed::LoggedCommunicator*>(dp.get())) return dp;
  if (!control) {
    if (cl.debug && std::string(dp->backend()) != "mpi")
      throw ConfigError(config.source, {"comms_logger.debug: the desync check exchanges fingerprints over a CPU "
                                        "communicator; pass the DistContext to stratum::initialize (or an MPI "
                                        "communicator), not a '" + std::string(dp->backend()) + "' one alone"});
    control = dp;
  }
  return distributed::with_comms_logger(std::move(dp), std::move(control), cl, std::move(log));
}

at::ScalarType training_dtype(const Config& config) {
  switch (config.precision()) {
    case config::DType::bf16: return at::kBFloat16;
    case config::DType::fp16: return at::kHalf;
    case config::DType::fp32: return at::kFloat;
  }
  return at::kFloat;
}

at::Tensor cast_input(const at::Tensor& t, at::ScalarType dtype) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.scalar_type() == dtype) return t;
  return t.to(dtype);
}

c10::Device device_of(const distributed::ProcessGrid& grid) {
  return grid.cuda_device() >= 0 ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(grid.cuda_device()))
                                 : c10::Device(c10::kCPU);
}

void check_grid(const Config& config, const distributed::ProcessGrid& grid) {
  const distributed::Topology& t = grid.topology();
  if (t.pp() == config.pipeline.stages && t.tp() == config.tensor_parallel.size && t.order() == config.topology.order)
    return;
  throw Error("process grid: rank " + std::to_string(grid.rank()) + ": the grid was built for " + grid.summary() +
              " but " + config.source + " asks for pipeline.stages " + std::to_string(config.pipeline.stages) +
              " x tensor_parallel.autotp_size " + std::to_string(config.tensor_parallel.size) + ", topology.order " +
              config.topology.order + "; build the grid from the config the engine is given");
}

void refuse_under_pipeline(const char* what, int stages) {
  throw Error(std::string("engine.") + what + ": the model is cut into " + std::to_string(stages) +
              " pipeline stages, whose micro-batches run through a schedule: train with engine.train_batch "
              "(evaluate with eval_batch), as DeepSpeed's PipelineEngine");
}

void check_micro_batch(const MicroBatch& b, int index, const char* what) {
  if (!b.inputs.defined() || !b.labels.defined())
    throw Error(std::string(what) + ": micro-batch " + std::to_string(index) + " has no " +
                (b.inputs.defined() ? "labels" : "inputs"));
}

std::optional<nn::SequenceLayout> micro_batch_layout(const MicroBatch& b, int index, const char* what,
                                                     c10::Device device) {
  if (!b.segment_ids.defined() && !b.position_ids.defined()) return std::nullopt;
  const std::string where = std::string(what) + ": micro-batch " + std::to_string(index) + ": ";
  nn::SequenceLayout layout{b.segment_ids, b.position_ids};
  try {
    nn::check_sequence_layout(layout);
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
  if (b.inputs.defined() && b.inputs.sizes() != b.segment_ids.sizes())
    throw Error(where + "segment_ids " + c10::str(b.segment_ids.sizes()) + " but inputs " + c10::str(b.inputs.sizes()));
  // On the host, before a device would read them: positions index RoPE's rows and GPT-2's position embedding.
  // (A context-parallel rank's part holds the whole rows' positions, checked before the cut.)
  if (!b.context && b.position_ids.device().is_cpu() && b.position_ids.numel() > 0) {
    const at::Tensor index = at::arange(b.position_ids.size(1), b.position_ids.options()).expand_as(b.position_ids);
    if (b.position_ids.lt(0).any().item<bool>() || b.position_ids.gt(index).any().item<bool>())
      throw Error(where + "a position id is negative or larger than its index in the row (packed positions restart "
                          "at 0 with each example)");
    if (b.segment_ids.lt(-1).any().item<bool>())
      throw Error(where + "a segment id below -1 (-1 marks padding)");
  }
  // The runs, counted here on the host, spare the GPU a mask (nn/segment_runs.h).
  std::shared_ptr<const nn::SegmentRuns> runs;
  if (b.context) return nn::SequenceLayout{b.segment_ids.to(device), b.position_ids.to(device), nullptr, b.context};
  if (b.segment_ids.device().is_cpu()) runs = std::make_shared<const nn::SegmentRuns>(b.segment_ids);
  return nn::SequenceLayout{b.segment_ids.to(device), b.position_ids.to(device), runs};
}

std::vector<double> token_weights(const std::vector<MicroBatch>& batches, distributed::Communicator& dp,
                                  c10::Device device) {
  std::vector<double> weights(batches.size(), 1.0);
  const auto given = [](const MicroBatch& b) { return b.loss_tokens >= 0; };
  if (std::none_of(batches.begin(), batches.end(), given)) return weights;  // token windows: no collective
  if (!std::all_of(batches.begin(), batches.end(), given))
    throw Error("a step's micro-batches give loss_tokens for some and not others; give it for all or none");
  double mine = 0;
  for (const MicroBatch& b : batches) mine += static_cast<double>(b.loss_tokens);
  at::Tensor total = at::tensor({mine}, at::TensorOptions().dtype(at::kDouble)).to(device);
  if (dp.size() > 1) dp.all_reduce(total, distributed::ReduceOp::sum)->wait();
  const double all = total.cpu().item<double>();
  if (all == 0) return weights;  // nothing to learn anywhere: each mean as it is
  const double per = static_cast<double>(batches.size()) * static_cast<double>(dp.size()) / all;
  for (size_t i = 0; i < batches.size(); ++i) weights[i] = static_cast<double>(batches[i].loss_tokens) * per;
  return weights;
}

nn::SequenceLayoutSlot* layout_slot(torch::nn::Module& model, const std::optional<nn::SequenceLayout>& layout,
                                    const char* what) {
  if (!layout) return nullptr;
  nn::LayerStackImpl* stack = as_layer_stack(model);
  if (!stack)
    throw Error(std::string(what) + ": the micro-batch " +
                (layout->context ? "is split by context parallelism" : "packs several sequences a row (segment_ids)") +
                " but the model is not a LayerStack whose attention reads that");
  return stack->sequence_layout().get();
}

double mean_over_data_parallel(at::Tensor sum, int64_t count, distributed::Communicator& dp) {
  at::Tensor mean = sum / static_cast<double>(count);
  if (dp.size() > 1) dp.all_reduce(mean, distributed::ReduceOp::avg)->wait();
  return mean.item<double>();
}

}  // namespace stratum::engine_detail
