#pragma once
// The engine API, DeepSpeed's shape in C++, one engine type for every layout:
//
//   auto engine = stratum::initialize(config, model, grid);  // or dist_context
//   for (...) {
//     auto loss = engine.forward(batch...);   // calls model->forward(batch...)
//     engine.backward(loss);
//     engine.step();                           // updates at accumulation boundaries
//   }
//   // or, a whole optimizer step (every layout; the only way with pipeline stages):
//   for (...) double loss = engine.train_batch(next_micro_batch);
//   double eval_loss = engine.eval_batch(next_eval_micro_batch, micro_batches);
//
// A step is a schedule of micro-batches: with pipeline.stages > 1 the model
// (a LayerStack with loss(output, labels), as the built-in causal LMs are) is
// cut into stages that run the config's pipeline schedule
// (engine/pipeline_stages.h); with one stage it is data parallelism's
// schedule, each micro-batch's forward and backward in turn, then the step.
//
// Any torch::nn::Module works for ZeRO stages 0-2 (only gradient hooks are
// needed). ZeRO-3 and activation checkpointing need a stratum::nn::LayerStack
// model (the engine runs its layers one by one). Floating-point tensor
// arguments of forward() are cast to the training dtype (bf16/fp16), integer
// ones (token ids) are passed as they are.
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "stratum/core/heartbeat.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/engine/context_shard.h"
#include "stratum/engine/engine_core.h"
#include "stratum/engine/float8_setup.h"
#include "stratum/engine/flops_profiler.h"
#include "stratum/engine/layer_runner.h"
#include "stratum/engine/pipeline_stages.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/generate.h"
#include "stratum/nn/deferred_init.h"
#include "stratum/nn/sequence_layout.h"
#include "stratum/zero/frozen_units.h"

namespace stratum {

namespace engine_detail {
// The trainable parameters of a module, in registration order, with their names.
void trainable_parameters(torch::nn::Module& module, std::vector<at::Tensor>& params, std::vector<std::string>& names);
// The frozen parameters (requires_grad false: a LoRA base) by name: all of
// the module's, or (`layers` given) those the stack's layers l with
// layers(l) true own or borrow. The engine holds no state for them; each rank
// draws and keeps the frozen weights of the layers it runs.
std::set<std::string> frozen_parameter_names(torch::nn::Module& module,
                                             const std::function<bool(size_t)>& layers = nullptr);
// ZeRO-3 over several data-parallel ranks, a model with a frozen base
// (LoRA): the frozen weights of the stack's layers l with layers(l) (all,
// when null), dense or NF4, partitioned over `dp` as bytes
// (zero/frozen_units.h); a skeleton's drawn one layer at a time, each
// partitioned before the next is drawn. nullptr when no layer has any. A
// frozen weight outside the layers, or one a layer borrows, stays whole (and
// undrawn here). `prefetch_bytes`: what gathers ahead may hold.
std::unique_ptr<zero::FrozenUnits> partition_frozen_base(torch::nn::Module& model, nn::LayerStackImpl& stack,
                                                         std::shared_ptr<distributed::Communicator> dp,
                                                         c10::Device device, at::ScalarType dtype,
                                                         int64_t prefetch_bytes,
                                                         const std::function<bool(size_t)>& layers = nullptr);
// Moves the module to `device` and casts its floating parameters and buffers to
// `dtype`; with `keep_trainable_params` (ZeRO-3) trainable parameters stay where they are.
void prepare_module(torch::nn::Module& module, c10::Device device, at::ScalarType dtype, bool keep_trainable_params);
// The module as a LayerStack, or nullptr.
nn::LayerStackImpl* as_layer_stack(torch::nn::Module& module);
// Installs the engine's layer runner on `stack` (ZeRO-3 gathering, activation
// checkpointing) when either is on; the returned guard takes it off again.
std::shared_ptr<void> install_layer_runner(nn::LayerStackImpl* stack, EngineCore& core, const Config& config);
at::ScalarType training_dtype(const Config& config);
// `dp` through the comms logger when config.comms_logger asks (dp itself
// otherwise, or when it is logged already); `control`: the CPU communicator of
// the same ranks for the desync check (null: dp itself, which must then be MPI).
// `log`: the job's (ProcessGrid::comms_log), null: a log of its own.
std::shared_ptr<distributed::Communicator> logged_data_parallel(const Config& config,
                                                                std::shared_ptr<distributed::Communicator> dp,
                                                                std::shared_ptr<distributed::Communicator> control,
                                                                std::shared_ptr<distributed::CommsLog> log = nullptr);
at::Tensor cast_input(const at::Tensor& t, at::ScalarType dtype);
// The grid's training device: its rank's GPU, else the CPU.
c10::Device device_of(const distributed::ProcessGrid& grid);
// Throws Error (naming the rank and both shapes) when `grid` was built for
// another pipeline x tensor-parallel shape or order than `config` asks for.
void check_grid(const Config& config, const distributed::ProcessGrid& grid);
// Throws Error for `what` (forward, backward, step) under pipeline stages.
[[noreturn]] void refuse_under_pipeline(const char* what, int stages);
// Checks a micro-batch train_batch / eval_batch read (`what` names the call).
void check_micro_batch(const MicroBatch& b, int index, const char* what);
// A micro-batch's packed layout on `device` (none when it has none),
// checked against its inputs on the host: shapes, segment ids from -1,
// each position below its index. Throws naming the micro-batch.
std::optional<nn::SequenceLayout> micro_batch_layout(const MicroBatch& b, int index, const char* what,
                                                     c10::Device device);
// Each micro-batch's loss weight in a step or an evaluation (MicroBatch::loss_tokens): n_i *
// m * dp / N, N the tokens over the step's m micro-batches and the dp ranks
// (one all-reduce over `dp`), so that the engine's mean of the weighted
// means is the mean over the step's tokens. All 1, with no collective, when
// no micro-batch gives its tokens; all 1 when the step has none. Throws when
// some give it and others do not.
std::vector<double> token_weights(const std::vector<MicroBatch>& batches, distributed::Communicator& dp,
                                  c10::Device device);
// The slot a layout is set in: the model's, when it is a LayerStack. Throws
// when a micro-batch has a layout and the model cannot read one.
nn::SequenceLayoutSlot* layout_slot(torch::nn::Module& model, const std::optional<nn::SequenceLayout>& layout,
                                    const char* what);
// A mixture of experts' routing (engine/moe_routing.h) attached to `core`
// when the stack's layers l with held(l) (all, when null) hold any
// nn::moe::SparseMoE block.
void attach_moe_routing(EngineCore& core, nn::LayerStackImpl* stack, const std::function<bool(size_t)>& held = nullptr);
// Expert parallelism over the grid's expert groups (grid.ep() > 1) added to
// `place` (empty, or tensor parallelism's): its expert-parallel and
// data-parallel groups, the parameters outside the experts summed over the
// expert group and counted by its first rank (engine_core.h), the whole
// model's names for checkpoints. `names`: the core's parameters (a pipeline
// stage's share), in its order. Throws ConfigError when the model's experts
// are split over another size.
void add_expert_parallel(ModelParallelPlace& place, const Config& config, torch::nn::Module& model,
                         const distributed::ProcessGrid& grid, const std::vector<std::string>& names);
// The mean of a window's summed losses over its `count` micro-batches and `dp`.
double mean_over_data_parallel(at::Tensor sum, int64_t count, distributed::Communicator& dp);

// What the ends of a pipeline make of a model's tokens and output: its
// loss(output, labels) and, for a built-in causal LM, generation's input and logits.
template <class Model>
StageHead stage_head(const std::shared_ptr<Model>& model) {
  Model* m = model.get();  // the engine holds the model: it outlives the head
  StageHead head;
  if constexpr (requires(Model& x, const at::Tensor& t) { x.loss(t, t); })
    head.loss = [m](const at::Tensor& out, const at::Tensor& labels) { return m->loss(out, labels); };
  if constexpr (std::is_base_of_v<models::CausalLMImpl, Model>) {
    head.input = [m](const at::Tensor& tokens) { return m->stack_input(tokens); };
    head.logits = [m](const at::Tensor& out, int64_t length) { return m->logits_of_output(out, length); };
    head.targets = [m](const at::Tensor& labels) { m->set_stage_targets(labels); };
  }
  return head;
}
}  // namespace engine_detail

template <class Model>
class Engine {
 public:
  Engine(std::shared_ptr<Model> model, std::unique_ptr<EngineCore> core, std::shared_ptr<void> runner_guard = nullptr)
      : model_(std::move(model)), core_(std::move(core)), runner_guard_(std::move(runner_guard)) {}
  // pipeline.stages > 1: this rank's stage of the model.
  Engine(std::shared_ptr<Model> model, std::unique_ptr<PipelineStages> stages)
      : model_(std::move(model)), pipeline_(std::move(stages)) {}

  // DeepSpeed's first API, with one pipeline stage. Timed (wall_clock_breakdown)
  // and, in the profiled step, observed by the flops profiler (engine/flops_profiler.h).
  template <class... Args>
  auto forward(Args&&... args) {
    if (pipeline_) engine_detail::refuse_under_pipeline("forward", pipeline_->stages());
    if (context_.enabled())
      throw Error("engine.forward: context parallelism splits each micro-batch's sequence over " +
                  std::to_string(context_.size()) + " ranks, which train_batch and eval_batch do; train with them");
    return model_forward(std::forward<Args>(args)...);
  }
  void backward(const at::Tensor& loss) {
    if (pipeline_) engine_detail::refuse_under_pipeline("backward", pipeline_->stages());
    core_->backward(loss);
  }
  bool step() {
    if (pipeline_) engine_detail::refuse_under_pipeline("step", pipeline_->stages());
    return core_->step();
  }

 private:
  template <class... Args>
  auto model_forward(Args&&... args) {
    heartbeat::beat();
    ForwardBracket bracket(*core_);
    if constexpr (std::is_void_v<decltype(model_->forward(cast(std::forward<Args>(args))...))>) {
      model_->forward(cast(std::forward<Args>(args))...);
      bracket.close();
    } else {
      auto out = model_->forward(cast(std::forward<Args>(args))...);
      bracket.close();
      return out;
    }
  }

 public:
  // The second API, every layout: one optimizer step over
  // gradient_accumulation_steps micro-batches read from `next_batch` (under a
  // pipeline on every stage: the first reads the inputs, the last the
  // labels, each a packed layout). Returns the step's mean loss over its micro-batches
  // and the data-parallel ranks (over their tokens when the micro-batches
  // give MicroBatch::loss_tokens), on every rank. With one stage the model's
  // forward(inputs, labels) returns the loss.
  double train_batch(const NextBatch& next_batch) {
    if (pipeline_) return pipeline_->train_batch(next_batch);
    const int64_t m = core_->batch().gradient_accumulation_steps;
    if (core_->micro_steps() % m != 0)
      throw Error("train_batch: " + std::to_string(core_->micro_steps() % m) + " of the window's " +
                  std::to_string(m) + " micro-steps were taken with forward/backward/step; finish the window first");
    at::Tensor sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(core_->device()));
    std::vector<MicroBatch> batches;
    for (int64_t i = 0; i < m; ++i) batches.push_back(read(next_batch, static_cast<int>(i), "train_batch"));
    const std::vector<double> weights = engine_detail::token_weights(batches, *core_->data_parallel(), core_->device());
    for (int64_t i = 0; i < m; ++i) {
      const MicroBatch& b = batches[static_cast<size_t>(i)];
      // Packed rows: the layout holds through the backward, which recomputes checkpointed layers.
      const auto layout = engine_detail::micro_batch_layout(b, static_cast<int>(i), "train_batch", core_->device());
      nn::SequenceLayoutScope packed(engine_detail::layout_slot(*model_, layout, "train_batch"), layout);
      const double w = weights[static_cast<size_t>(i)];
      const at::Tensor mean = forward_loss(b, static_cast<int>(i), "train_batch");
      const at::Tensor loss = w == 1.0 ? mean : mean * w;
      backward(loss);
      step();
      sum += loss.detach().to(at::kFloat);
    }
    return engine_detail::mean_over_data_parallel(sum, m, *core_->data_parallel());
  }
  // The mean loss of `micro_batches` micro-batches (0: gradient_accumulation_steps)
  // over them and the data-parallel ranks (over their tokens when they give
  // MicroBatch::loss_tokens), on every rank: forwards alone, in
  // eval mode, without autograd; nothing is trained. Every rank passes the same count.
  double eval_batch(const NextBatch& next_batch, int micro_batches = 0) {
    const int m = micro_batches > 0 ? micro_batches : static_cast<int>(core().batch().gradient_accumulation_steps);
    if (pipeline_) return pipeline_->eval_batch(next_batch, m);
    core_->sync_params();
    c10::AutoGradMode no_grad(false);
    const bool was_training = model_->is_training();
    model_->eval();
    at::Tensor sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(core_->device()));
    try {
      std::vector<MicroBatch> batches;
      for (int i = 0; i < m; ++i) batches.push_back(read(next_batch, i, "eval_batch"));
      const std::vector<double> weights =
          engine_detail::token_weights(batches, *core_->data_parallel(), core_->device());
      for (int i = 0; i < m; ++i) {
        const MicroBatch& b = batches[static_cast<size_t>(i)];
        const auto layout = engine_detail::micro_batch_layout(b, i, "eval_batch", core_->device());
        nn::SequenceLayoutScope packed(engine_detail::layout_slot(*model_, layout, "eval_batch"), layout);
        sum += forward_loss(b, i, "eval_batch").to(at::kFloat) * weights[static_cast<size_t>(i)];
      }
    } catch (...) {
      model_->train(was_training);
      throw;
    }
    model_->train(was_training);
    return engine_detail::mean_over_data_parallel(sum, m, *core_->data_parallel());
  }

  // Text from a built-in causal LM (models/generate.h), through the stages
  // under a pipeline. Every rank of the job calls it (ZeRO-3's gathers and the
  // stages' forwards are collective) and gets the same tokens.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, const models::GenerateOptions& options)
    requires std::is_base_of_v<models::CausalLMImpl, Model>
  {
    if (!pipeline_) return models::generate(module(), prompt, options);
    PipelineStages& stages = *pipeline_;
    return models::generate([&stages](const at::Tensor& tokens) { return stages.next_token_logits(tokens); },
                            model_->config(), prompt, options);
  }

  // The model with its parameters final (see EngineCore::sync_params); under a
  // pipeline only this stage's parameters are materialized.
  Model& module() {
    core().sync_params();
    return *model_;
  }
  const std::shared_ptr<Model>& model() const { return model_; }
  EngineCore& core() { return pipeline_ ? pipeline_->core() : *core_; }
  const EngineCore& core() const { return pipeline_ ? pipeline_->core() : *core_; }
  // This rank's pipeline stage (null with one stage): its partition, schedule, timing.
  PipelineStages* pipeline() { return pipeline_.get(); }
  const PipelineStages* pipeline() const { return pipeline_.get(); }
  int stages() const { return pipeline_ ? pipeline_->stages() : 1; }
  int stage() const { return pipeline_ ? pipeline_->stage() : 0; }
  bool is_first_stage() const { return stage() == 0; }
  bool is_last_stage() const { return stage() == stages() - 1; }
  int64_t global_steps() const { return core().global_steps(); }
  double lr() const { return core().lr(); }
  double loss_scale() const { return core().loss_scale(); }
  bool last_step_skipped() const { return core().last_step_skipped(); }
  bool is_gradient_accumulation_boundary() const { return core().is_gradient_accumulation_boundary(); }

  // Context parallelism (initialize sets it from the grid): train_batch and
  // eval_batch keep this rank's part of each micro-batch's sequence, whose
  // length must split so, and a multiple of `multiple` (the tensor-parallel
  // size under sequence parallelism). Pipeline stages take it from the grid.
  void set_context_parallel(nn::cp::ContextParallel cp, int64_t multiple) {
    context_ = std::move(cp);
    context_multiple_ = multiple;
  }
  const nn::cp::ContextParallel& context_parallel() const {
    return pipeline_ ? pipeline_->context_parallel() : context_;
  }

 private:
  MicroBatch read(const NextBatch& next_batch, int index, const char* what) {
    MicroBatch b = next_batch();
    if (!context_.enabled()) return b;
    return engine_detail::context_shard(b, context_, context_multiple_, index, what, core_->device());
  }
  template <class T>
  decltype(auto) cast(T&& v) {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) return engine_detail::cast_input(v, core_->model_dtype());
    else return std::forward<T>(v);
  }
  // Micro-batch `index` of a window through the model's forward(inputs, labels).
  at::Tensor forward_loss(const MicroBatch& b, int index, const char* what) {
    if constexpr (requires(Model& m, const at::Tensor& t) {
                    { m.forward(t, t) } -> std::convertible_to<at::Tensor>;
                  }) {
      engine_detail::check_micro_batch(b, index, what);
      return model_forward(b.inputs.to(core_->device()), b.labels.to(core_->device()));
    } else {
      throw Error(std::string(what) + " needs a model whose forward(inputs, labels) returns the loss; call forward, "
                  "backward and step yourself");
    }
  }

  std::shared_ptr<Model> model_;
  std::unique_ptr<PipelineStages> pipeline_;  // pipeline.stages > 1: it holds the core
  nn::cp::ContextParallel context_;
  int64_t context_multiple_ = 1;
  std::unique_ptr<EngineCore> core_;
  std::shared_ptr<void> runner_guard_;  // declared last: the runner goes before the core it points into
};

namespace engine_detail {
template <class Model>
Engine<Model> initialize_core(const Config& config, std::shared_ptr<Model> model,
                              std::shared_ptr<distributed::Communicator> dp, c10::Device device,
                              std::optional<ModelParallelPlace> model_parallel) {
  check_float8_device(config, device);  // before any collective: every rank refuses alike
  if (!model_parallel && tensor_parallel_size(*model) > 1)
    throw ConfigError(config.source, {"tensor_parallel.autotp_size: " + std::to_string(config.tensor_parallel.size) +
                                      " but the model is sharded over " + std::to_string(tensor_parallel_size(*model)) +
                                      " ranks; set autotp_size to match and pass the DistContext to stratum::initialize"});
  const at::ScalarType dtype = training_dtype(config);
  nn::LayerStackImpl* stack = as_layer_stack(*model);
  const bool stage3 = stack && config.zero_optimization.stage == 3;
  // A model born sharded (nn/deferred_init.h): ZeRO-3 draws a layer's
  // parameters when it partitions them; the other stages hold them whole.
  const bool skeleton = nn::has_unmaterialized_parameters(*model);
  if (skeleton && !stage3) nn::materialize(*model, device, dtype);
  // A frozen base at ZeRO-3 over several ranks is partitioned as bytes; over one it stays whole.
  const std::set<std::string> frozen = stage3 ? frozen_parameter_names(*model) : std::set<std::string>{};
  const bool partition_frozen = stage3 && dp->size() > 1 && !frozen.empty();
  auto draw_frozen = [&] {
    nn::materialize(*model, device, dtype, [&](const std::string& name) { return frozen.count(name) > 0; });
  };
  if (skeleton && stage3 && !partition_frozen) draw_frozen();
  prepare_module(*model, device, dtype, /*keep_trainable_params=*/stage3);
  std::unique_ptr<zero::FrozenUnits> frozen_units;
  if (partition_frozen) {
    frozen_units = partition_frozen_base(*model, *stack, dp, device, dtype,
                                         config.zero_optimization.stage3_prefetch_bucket_size *
                                             static_cast<int64_t>(c10::elementSize(dtype)));
    if (skeleton) draw_frozen();  // what no layer partitions, whole
  }
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  trainable_parameters(*model, params, names);
  std::function<at::Tensor(int)> initial_value;
  if (skeleton && stage3) {
    const auto* source = dynamic_cast<const nn::DeferredInit*>(model.get());
    if (!source) nn::materialize(*model, device, dtype);  // names the parameter it cannot draw
    initial_value = [source, names, device, dtype](int p) { return source->initial_value(names[p], device, dtype); };
  }
  std::optional<zero::LayerParams> layers;
  if (stack) layers = layer_params(*stack, params);
  // The profiler's parameter counts, before ZeRO-3 partitions the parameters.
  std::optional<ModelOutline> outline;
  if (config.flops_profiler.enabled) outline = model_outline(*model, stack);
  auto core = std::make_unique<EngineCore>(config, std::move(params), std::move(names), dtype, std::move(dp), device,
                                           std::move(layers), std::move(model_parallel), std::move(initial_value));
  if (outline) core->attach_flops_profiler(std::move(*outline));
  if (frozen_units) core->attach_frozen_units(std::move(frozen_units));
  attach_moe_routing(*core, stack);
  attach_float8(config, *model, *core);
  auto guard = install_layer_runner(stack, *core, config);
  return Engine<Model>(std::move(model), std::move(core), std::move(guard));
}
}  // namespace engine_detail

// Data parallel over `dp` with the model on `device`. With the comms_logger
// section on, `dp` is logged (unless it already is); its debug mode then needs
// a CPU `dp` (MPI) to exchange fingerprints over, or the DistContext overload.
template <class Model>
Engine<Model> initialize(const Config& config, std::shared_ptr<Model> model, std::shared_ptr<distributed::Communicator> dp,
                         c10::Device device) {
  dp = engine_detail::logged_data_parallel(config, std::move(dp), nullptr);
  return engine_detail::initialize_core(config, std::move(model), std::move(dp), device, std::nullopt);
}

namespace engine_detail {
// initialize(config, model, grid) with one pipeline stage.
template <class Model>
Engine<Model> initialize_over_grid(const Config& config, std::shared_ptr<Model> model,
                                   const distributed::ProcessGrid& grid, c10::Device device) {
  // Expert parallelism: the core's group is the ranks holding the same experts.
  const bool ep = grid.ep() > 1;
  std::shared_ptr<distributed::Communicator> dp = ep ? grid.expert_dp_group() : grid.dp_group();
  std::shared_ptr<distributed::Communicator> dp_control = ep ? grid.cpu_expert_dp_group() : grid.cpu_dp_group();
  if (config.tensor_parallel.size > 1 || engine_detail::tensor_parallel_size(*model) > 1) {
    engine_detail::TensorParallelEngineGroups g = engine_detail::tensor_parallel_engine_groups(config, *model, grid);
    if (ep) {
      std::vector<at::Tensor> params;
      std::vector<std::string> names;
      engine_detail::trainable_parameters(*model, params, names);
      engine_detail::add_expert_parallel(g.place, config, *model, grid, names);
      g.dp = dp;
      g.dp_control = dp_control;
    }
    return engine_detail::initialize_core(config, std::move(model),
                                          engine_detail::logged_data_parallel(config, g.dp, g.dp_control,
                                                                              grid.comms_log()),
                                          device, std::move(g.place));
  }
  std::optional<ModelParallelPlace> place;
  if (ep) {
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    engine_detail::trainable_parameters(*model, params, names);
    engine_detail::add_expert_parallel(place.emplace(), config, *model, grid, names);
  }
  return engine_detail::initialize_core(
      config, std::move(model), engine_detail::logged_data_parallel(config, dp, dp_control, grid.comms_log()), device,
      std::move(place));
}
}  // namespace engine_detail

// Over the process grid (distributed/process_grid.h, built from this config),
// on its rank's training device. With pipeline.stages > 1 the model (a
// LayerStack with loss(output, labels)) is cut into the grid's stages, each
// data parallel over its group (engine/pipeline_stages.h). With
// tensor_parallel.autotp_size t > 1 the model must be sharded over
// tensor_parallel_group(config, grid) (engine/tensor_parallel_setup.h) and the
// data-parallel group is the world / (stages x t) ranks of this rank's
// stage and TP index. The engine keeps its own references to the grid's
// communicators.
template <class Model>
Engine<Model> initialize(const Config& config, std::shared_ptr<Model> model, const distributed::ProcessGrid& grid) {
  engine_detail::check_grid(config, grid);
  const c10::Device device = engine_detail::device_of(grid);
  if (config.pipeline.stages > 1) {
    if constexpr (std::is_base_of_v<nn::LayerStackImpl, Model>) {
      StageHead head = engine_detail::stage_head(model);
      if (!head.loss)
        throw ConfigError(config.source, {"pipeline.stages: " + std::to_string(config.pipeline.stages) +
                                          " stages: the last one computes the loss from the stack's output, so the "
                                          "model needs loss(output, labels)"});
      auto stages = std::make_unique<PipelineStages>(config, model, std::move(head), grid);
      return Engine<Model>(std::move(model), std::move(stages));
    } else {
      throw ConfigError(config.source, {"pipeline.stages: " + std::to_string(config.pipeline.stages) +
                                        " stages cut a stratum::nn::LayerStack model by its layers; this model "
                                        "is not one"});
    }
  }
  Engine<Model> engine = engine_detail::initialize_over_grid(config, std::move(model), grid, device);
  engine.set_context_parallel(engine_detail::context_parallel_of(config, grid),
                              config.tensor_parallel.sequence_parallel ? config.tensor_parallel.size : 1);
  return engine;
}

// Over the whole job: the grid built here (ProcessGrid::create, collective;
// ConfigError on every rank when the shape does not fit). A tensor-parallel
// model built over tensor_parallel_group(config, ctx) keeps its own group of
// the same ranks.
template <class Model>
Engine<Model> initialize(const Config& config, std::shared_ptr<Model> model, const distributed::DistContext& ctx) {
  return initialize(config, std::move(model), distributed::ProcessGrid::create(config, ctx));
}

}  // namespace stratum
