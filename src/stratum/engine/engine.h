#pragma once
// The engine API, DeepSpeed's shape in C++:
//
//   auto engine = stratum::initialize(config, model, grid);  // or dist_context
//   for (...) {
//     auto loss = engine.forward(batch...);   // calls model->forward(batch...)
//     engine.backward(loss);
//     engine.step();                           // updates at accumulation boundaries
//   }
//
// Any torch::nn::Module works for ZeRO stages 0-2 (only gradient hooks are
// needed). ZeRO-3 and activation checkpointing need a stratum::nn::LayerStack
// model (the engine runs its layers one by one). Floating-point tensor
// arguments of forward() are cast to the training dtype (bf16/fp16), integer
// ones (token ids) are passed as they are.
#include <memory>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "stratum/core/heartbeat.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/engine/engine_core.h"
#include "stratum/engine/flops_profiler.h"
#include "stratum/engine/layer_runner.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/nn/deferred_init.h"

namespace stratum {

namespace engine_detail {
// The trainable parameters of a module, in registration order, with their names.
void trainable_parameters(torch::nn::Module& module, std::vector<at::Tensor>& params, std::vector<std::string>& names);
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
std::shared_ptr<distributed::Communicator> logged_data_parallel(const Config& config,
                                                                std::shared_ptr<distributed::Communicator> dp,
                                                                std::shared_ptr<distributed::Communicator> control);
at::Tensor cast_input(const at::Tensor& t, at::ScalarType dtype);
// The grid's training device: its rank's GPU, else the CPU.
c10::Device device_of(const distributed::ProcessGrid& grid);
// Throws Error (naming the rank and both shapes) when `grid` was built for
// another pipeline x tensor-parallel shape or order than `config` asks for.
void check_grid(const Config& config, const distributed::ProcessGrid& grid);
}  // namespace engine_detail

template <class Model>
class Engine {
 public:
  Engine(std::shared_ptr<Model> model, std::unique_ptr<EngineCore> core, std::shared_ptr<void> runner_guard = nullptr)
      : model_(std::move(model)), core_(std::move(core)), runner_guard_(std::move(runner_guard)) {}

  // Timed (wall_clock_breakdown) and, in the profiled step, observed by the
  // flops profiler (engine/flops_profiler.h).
  template <class... Args>
  auto forward(Args&&... args) {
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
  void backward(const at::Tensor& loss) { core_->backward(loss); }
  bool step() { return core_->step(); }

  // The model with its parameters final (see EngineCore::sync_params).
  Model& module() {
    core_->sync_params();
    return *model_;
  }
  const std::shared_ptr<Model>& model() const { return model_; }
  EngineCore& core() { return *core_; }
  const EngineCore& core() const { return *core_; }
  int64_t global_steps() const { return core_->global_steps(); }
  double lr() const { return core_->lr(); }
  double loss_scale() const { return core_->loss_scale(); }
  bool last_step_skipped() const { return core_->last_step_skipped(); }
  bool is_gradient_accumulation_boundary() const { return core_->is_gradient_accumulation_boundary(); }

 private:
  template <class T>
  decltype(auto) cast(T&& v) {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) return engine_detail::cast_input(v, core_->model_dtype());
    else return std::forward<T>(v);
  }

  std::shared_ptr<Model> model_;
  std::unique_ptr<EngineCore> core_;
  std::shared_ptr<void> runner_guard_;  // declared last: the runner goes before the core it points into
};

namespace engine_detail {
template <class Model>
Engine<Model> initialize_core(const Config& config, std::shared_ptr<Model> model,
                              std::shared_ptr<distributed::Communicator> dp, c10::Device device,
                              std::optional<ModelParallelPlace> model_parallel) {
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
  prepare_module(*model, device, dtype, /*keep_trainable_params=*/stage3);
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

// Over the process grid (distributed/process_grid.h, built from this config):
// data parallel over its data-parallel group, on its rank's training device;
// with tensor_parallel.autotp_size t > 1 the model must be sharded over
// tensor_parallel_group(config, grid) (engine/tensor_parallel_setup.h) and the
// data-parallel group is the world / t ranks of this rank's TP index. The
// engine keeps its own references to the grid's communicators.
template <class Model>
Engine<Model> initialize(const Config& config, std::shared_ptr<Model> model, const distributed::ProcessGrid& grid) {
  engine_detail::check_grid(config, grid);
  const c10::Device device = engine_detail::device_of(grid);
  if (config.tensor_parallel.size > 1 || engine_detail::tensor_parallel_size(*model) > 1) {
    engine_detail::TensorParallelEngineGroups g = engine_detail::tensor_parallel_engine_groups(config, *model, grid);
    return engine_detail::initialize_core(config, std::move(model),
                                          engine_detail::logged_data_parallel(config, g.dp, g.dp_control), device,
                                          std::move(g.place));
  }
  return initialize(config, std::move(model),
                    engine_detail::logged_data_parallel(config, grid.dp_group(), grid.cpu_dp_group()), device);
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
