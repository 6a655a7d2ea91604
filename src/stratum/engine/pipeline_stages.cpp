#include "stratum/engine/pipeline_stages.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <set>

#include "stratum/core/heartbeat.h"
#include "stratum/core/log.h"
#include "stratum/distributed/logged_communicator.h"
#include "stratum/distributed/wait_context.h"
#include "stratum/engine/context_shard.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/float8_setup.h"
#include "stratum/engine/flops_profiler.h"
#include "stratum/engine/param_runs.h"
#include "stratum/pipeline/schedule.h"
#include "stratum/nn/checkpoint.h"
#include "stratum/nn/deferred_init.h"

namespace stratum {
namespace {

// One stage's share of the model's trainable parameters.
struct StageParameters {
  std::vector<at::Tensor> params;  // those its layers own or borrow, in registration order
  std::vector<std::string> names;
  std::vector<int> tied;           // indices into params of those another stage holds too
  bool any_tied = false;           // some parameter spans two stages (on any rank)
};

// This stage's parameters, drawn here (`draw`) when the model is a skeleton
// (born sharded: nn/deferred_init.h), its frozen ones unless the caller
// partitions them (`draw_frozen` false); the other stages' stay unmaterialized, or
// are freed (their storage set empty) when the model was built whole. Throws
// ConfigError when a parameter spans stages other than the first and the last
// (the tied embedding and head is the one sharing allowed).
StageParameters take_stage_parameters(nn::LayerStackImpl& model, std::vector<at::Tensor>& all_params,
                                      const std::vector<std::string>& all_names, const zero::LayerParams& layers,
                                      const pipeline::Partition& partition, int stage, int stages,
                                      const std::string& source, c10::Device device, at::ScalarType dtype, bool draw,
                                      bool draw_frozen) {
  std::vector<std::set<int>> holders(all_params.size());  // the stages whose layers read each parameter
  for (size_t l = 0; l < model.size(); ++l) {
    const int s = partition.part_of(l) % stages;
    for (int i : layers.own[l]) holders[i].insert(s);
    for (int i : layers.borrowed[l]) holders[i].insert(s);
  }
  StageParameters out;
  c10::AutoGradMode no_grad(false);
  for (size_t i = 0; i < all_params.size(); ++i) {
    const std::set<int>& h = holders[i];
    if (h.size() > 1) {
      out.any_tied = true;
      if (h.size() != 2 || *h.begin() != 0 || *h.rbegin() != stages - 1)
        throw ConfigError(source, {"pipeline: parameter '" + all_names[i] + "' is read by layers on " +
                                   std::to_string(h.size()) + " stages; a shared parameter may span only the "
                                   "first and the last stage (a tied embedding and head)"});
    }
    if (h.count(stage)) {
      if (h.size() > 1) out.tied.push_back(static_cast<int>(out.params.size()));
      out.params.push_back(all_params[i]);
      out.names.push_back(all_names[i]);
    } else if (!nn::is_unmaterialized(all_params[i])) {
      all_params[i].set_data(at::empty({0}, all_params[i].options()));  // another stage's: freed
    }
  }
  // Frozen weights (a LoRA base; the engine keeps no state for them): this
  // stage's drawn whole, the others' freed.
  const std::set<std::string> frozen_here = engine_detail::frozen_parameter_names(
      model, [&](size_t l) { return partition.part_of(l) % stages == stage; });
  for (auto& item : model.named_parameters(/*recurse=*/true))
    if (!item.value().requires_grad() && !frozen_here.count(item.key()) && !nn::is_unmaterialized(item.value()))
      item.value().set_data(at::empty({0}, item.value().options()));
  if (draw_frozen)
    nn::materialize(model, device, dtype, [&](const std::string& name) { return frozen_here.count(name) > 0; });
  // Born sharded: only this stage's parameters are ever drawn, one at a time
  // (at ZeRO-3 by the core, one layer at a time as it partitions them).
  if (!draw) return out;
  const std::set<std::string> mine(out.names.begin(), out.names.end());
  nn::materialize(model, device, dtype, [&](const std::string& name) { return mine.count(name) > 0; });
  return out;
}

}  // namespace

PipelineStages::PipelineStages(const Config& config, std::shared_ptr<nn::LayerStackImpl> model, StageHead head,
                               const distributed::ProcessGrid& grid)
    : config_(config),
      model_(std::move(model)),
      head_(std::move(head)),
      device_(engine_detail::device_of(grid)) {
  if (!model_) throw Error("stratum::initialize: no model");
  if (!head_.loss) throw Error("stratum::initialize: a pipeline's last stage needs the model's loss");
  engine_detail::check_float8_device(config_, device_);  // before any collective: every rank refuses alike
  // The grid checked the shape (ProcessGrid::problems): stages and TP divide the world, TP stays in a node.
  engine_detail::check_grid(config_, grid);
  context_ = engine_detail::context_parallel_of(config_, grid);
  const auto& world = grid.world();
  stages_ = static_cast<int>(grid.pp());
  chunks_ = static_cast<int>(config_.pipeline.virtual_stages);
  stage_ = static_cast<int>(grid.coord().pp);
  // Tensor parallelism inside the stages: the model is built sharded over the grid's TP groups.
  const nn::tp::ShardedModule* sharded =
      config_.tensor_parallel.size > 1 || engine_detail::tensor_parallel_size(*model_) > 1
          ? &engine_detail::sharded_as_configured(config_, *model_, grid.rank(), grid.coord().tp)
          : nullptr;

  // Partition the whole model's layers (every rank alike, before any collective).
  std::vector<at::Tensor> all_params;
  std::vector<std::string> all_names;
  engine_detail::trainable_parameters(*model_, all_params, all_names);
  const zero::LayerParams all_layers = layer_params(*model_, all_params);
  std::vector<pipeline::LayerWeight> weights;
  for (size_t l = 0; l < model_->size(); ++l) {
    int64_t n = 0;
    for (int i : all_layers.own[l]) n += all_params[i].numel();
    weights.push_back({model_->layer(l).name(), n});
  }
  try {
    partition_ = pipeline::partition_layers(weights, stages_ * chunks_, config_.pipeline.partition_method,
                                            "pipeline.partition_method \"" + config_.pipeline.partition_method + "\"");
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(config_.source, {e.what()});
  }
  pipeline::Schedule schedule;
  try {
    schedule = pipeline::make_schedule(config_.pipeline.schedule, stages_,
                                       static_cast<int>(config_.resolve_batch(world->size()).gradient_accumulation_steps),
                                       chunks_);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(config_.source, {std::string("pipeline.schedule: ") + e.what()});
  }
  // The flops profiler's outline: rank 0's stage, counted before anything is freed or partitioned.
  std::optional<ModelOutline> outline;
  if (config_.flops_profiler.enabled && grid.rank() == 0) outline = model_outline(*model_, model_.get());

  const at::ScalarType dtype = engine_detail::training_dtype(config_);
  // ZeRO-3: the stage's parameters are drawn one layer at a time as the core partitions them.
  const bool stage3 = config_.zero_optimization.stage == 3;
  // ZeRO-3 over several ranks partitions this stage's frozen base, drawing it one layer at a time.
  auto this_stage = [&](size_t l) { return partition_.part_of(l) % stages_ == stage_; };
  const bool partition_frozen = stage3 && grid.dp_group()->size() > 1 &&
                                !engine_detail::frozen_parameter_names(*model_, this_stage).empty();
  StageParameters mine = take_stage_parameters(*model_, all_params, all_names, all_layers, partition_, stage_, stages_,
                                               config_.source, device_, dtype, /*draw=*/!stage3,
                                               /*draw_frozen=*/!partition_frozen);
  std::vector<at::Tensor>& params = mine.params;
  names_ = std::move(mine.names);
  tied_ = std::move(mine.tied);
  const bool any_tied = mine.any_tied;
  if (params.empty())
    throw ConfigError(config_.source, {"pipeline: stage " + std::to_string(stage_) + " holds layers " +
                                       pipeline::describe(partition_) + " but no trainable parameter"});
  std::function<at::Tensor(int)> initial_value;
  if (stage3 && std::any_of(params.begin(), params.end(), [](const at::Tensor& p) { return nn::is_unmaterialized(p); })) {
    const auto* source = dynamic_cast<const nn::DeferredInit*>(model_.get());
    const std::set<std::string> names(names_.begin(), names_.end());
    if (!source)  // names the parameter it cannot draw
      nn::materialize(*model_, device_, dtype, [&](const std::string& name) { return names.count(name) > 0; });
    else
      initial_value = [source, names = names_, device = device_, dtype](int p) {
        return source->initial_value(names[p], device, dtype);
      };
  }
  if (outline) {
    std::vector<ProfiledModule> kept;
    for (size_t l = 0; l < outline->layers.size(); ++l)
      if (partition_.part_of(l) % stages_ == stage_) kept.push_back(std::move(outline->layers[l]));
    outline->layers = std::move(kept);
    outline->model.params = 0;
    for (const at::Tensor& p : params) outline->model.params += p.numel();
  }

  engine_detail::prepare_module(*model_, device_, dtype, /*keep_trainable_params=*/stage3);
  pp_ = grid.pp_group();
  control_ = grid.cpu_pp_group();
  // Expert parallelism: the stage's core partitions over the ranks holding the same experts.
  const bool ep = grid.ep() > 1;
  dp_ = engine_detail::logged_data_parallel(config_, ep ? grid.expert_dp_group() : grid.dp_group(),
                                            ep ? grid.cpu_expert_dp_group() : grid.cpu_dp_group(), grid.comms_log());
  // comms_logger: the stage transfers (send/recv rows) and the step's
  // reductions over the stages go into the same log as the data-parallel ones.
  // Not the grid's: with_comms_logger splits the CPU twin for the desync check
  // alone, apart from the executor's control messages on it.
  if (auto* logged = dynamic_cast<distributed::LoggedCommunicator*>(dp_.get()))
    pp_ = distributed::with_comms_logger(pp_, grid.cpu_pp_group(), config_.comms_logger, logged->comms_log());

  // Tied parameters: equal from the start (the first stage's values, before
  // the core copies them into its masters); their gradients summed each step.
  if (any_tied) {
    // ZeRO-0 keeps whole gradients on every data-parallel rank: pair stage 0
    // and stage p-1 of each pipeline. Stages 1-3 partition them, each stage
    // differently: all ranks of both stages sum the pieces they hold.
    tied_group_ = grid.tied(config_.zero_optimization.stage == 0);
    c10::AutoGradMode no_grad(false);
    for (int i : tied_) {  // the group's first rank is a stage-0 rank (ProcessGrid::tied_groups)
      // Born sharded at ZeRO-3: both stages draw it by name, the same values; nothing to send.
      if (nn::is_unmaterialized(params[i])) continue;
      at::Tensor value = params[i].detach().clone();
      tied_group_->broadcast(value, 0)->wait();
      params[i].copy_(value);
    }
  }
  ModelParallelPlace reduction;
  reduction.stages = pp_;
  if (stage_ == stages_ - 1 && stages_ > 1) reduction.stage_duplicates = tied_;
  if (sharded) engine_detail::add_tensor_parallel(reduction, *sharded, names_);
  if (ep) engine_detail::add_expert_parallel(reduction, config_, *model_, grid, names_);
  std::unique_ptr<zero::FrozenUnits> frozen;
  if (partition_frozen) {
    frozen = engine_detail::partition_frozen_base(
        *model_, *model_, dp_, device_, dtype,
        config_.zero_optimization.stage3_prefetch_bucket_size * static_cast<int64_t>(c10::elementSize(dtype)),
        this_stage);
    const std::set<std::string> rest = engine_detail::frozen_parameter_names(*model_, this_stage);
    nn::materialize(*model_, device_, dtype, [&](const std::string& name) { return rest.count(name) > 0; });
  }
  zero::LayerParams layers = layer_params(*model_, params);
  core_ = std::make_unique<EngineCore>(config_, params, names_, dtype, dp_, device_, std::move(layers), reduction,
                                       std::move(initial_value));
  if (frozen) core_->attach_frozen_units(std::move(frozen));
  engine_detail::attach_moe_routing(*core_, model_.get(), this_stage);
  // Every stage's projections (other stages' never run); each stage's core
  // invalidates the FP8 weight copies after its own optimizer step.
  engine_detail::attach_float8(config_, *model_, *core_);
  if (outline) core_->attach_flops_profiler(std::move(*outline));
  if (any_tied && core_->strategy().partitioned() != (config_.zero_optimization.stage != 0))
    throw Error("pipeline: the tied gradients' group assumed ZeRO stage " +
                std::to_string(config_.zero_optimization.stage) + " to " +
                (core_->strategy().partitioned() ? "keep whole gradients" : "partition them"));
  runner_guard_ = engine_detail::install_layer_runner(model_.get(), *core_, config_);
  place_.stage = stage_;
  place_.stages = stages_;
  place_.world = world;
  // Every (stage, tensor-parallel index) of data-parallel index 0, in shard order.
  place_.leaders = grid.leaders();
  if (stage_ == stages_ - 1 && stages_ > 1)
    for (int i : tied_) place_.written_elsewhere.insert(names_[i]);  // the first stage writes it
  place_.model_params = all_names;
  for (size_t l = 0; l < model_->size(); ++l) place_.layer_stages.push_back(partition_.part_of(l) % stages_);
  executor_ = std::make_unique<pipeline::ScheduleExecutor>(std::move(schedule), pp_, control_, device_);
  if (world->rank() == 0)
    log::info("pipeline: " + std::to_string(stages_) + " stages x " + std::to_string(grid.dp()) +
              " data-parallel" +
              (grid.tp() > 1 ? " x " + std::to_string(grid.tp()) + " tensor-parallel" : std::string()) +
              ", schedule " + config::pipeline_schedule_name(config_.pipeline.schedule) + ", " +
              std::to_string(executor_->schedule().micro_batches) + " micro-batches a step, ZeRO " +
              std::to_string(config_.zero_optimization.stage) + "; layers by stage " + pipeline::describe(partition_));
}

PipelineStages::~PipelineStages() = default;

void PipelineStages::read_batches(const NextBatch& next_batch, int m, const char* what) {
  batches_.clear();
  layouts_.clear();
  const int64_t multiple = config_.tensor_parallel.sequence_parallel ? config_.tensor_parallel.size : 1;
  for (int i = 0; i < m; ++i) {
    MicroBatch b = next_batch();
    if (context_.enabled()) b = engine_detail::context_shard(b, context_, multiple, i, what, device_);
    if ((is_first_stage() && !b.inputs.defined()) || (is_last_stage() && !b.labels.defined()))
      throw Error(std::string(what) + ": micro-batch " + std::to_string(i) + " has no " +
                  (is_first_stage() && !b.inputs.defined() ? "inputs" : "labels"));
    if (is_first_stage() && i > 0 && b.inputs.sizes() != batches_.front().inputs.sizes())
      throw Error(std::string(what) + ": micro-batch " + std::to_string(i) + " has inputs " +
                  c10::str(b.inputs.sizes()) + " but micro-batch 0 " + c10::str(batches_.front().inputs.sizes()) +
                  "; a step's micro-batches share one shape");
    // Every stage's attention reads a packed layout; only the ends read the tokens and labels.
    layouts_.push_back(engine_detail::micro_batch_layout(b, i, what, device_));
    if (layouts_.back()) engine_detail::layout_slot(*model_, layouts_.back(), what);
    b.inputs = is_first_stage() ? engine_detail::cast_input(b.inputs.to(device_), core_->model_dtype()) : at::Tensor();
    b.labels = is_last_stage() && b.labels.defined() ? b.labels.to(device_) : at::Tensor();
    b.segment_ids = b.position_ids = at::Tensor();
    batches_.push_back(std::move(b));
  }
  // Token-weighted losses (MicroBatch::loss_tokens), in training and evaluation alike: the last stage's.
  weights_ = is_last_stage() ? engine_detail::token_weights(batches_, *core_->data_parallel(), device_)
                             : std::vector<double>(batches_.size(), 1.0);
}

nn::SequenceLayoutSlot* PipelineStages::micro_layout_slot(int micro) const {
  const bool packed = micro < static_cast<int>(layouts_.size()) && layouts_[micro];
  return packed ? model_->sequence_layout().get() : nullptr;
}

bool PipelineStages::input_shape_changed() {
  at::Tensor shape = at::zeros({8}, at::kLong);
  if (is_first_stage()) {
    const auto sizes = batches_.front().inputs.sizes();
    shape[0] = static_cast<int64_t>(sizes.size());
    for (size_t d = 0; d < sizes.size() && d < 7; ++d) shape[d + 1] = sizes[d];
  }
  if (stages_ > 1) {
    distributed::WaitContext context(where() + "the step's input shape from stage 0");
    control_->broadcast(shape, 0)->wait();
  }
  std::vector<int64_t> input_shape(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + 8);
  const bool changed = input_shape != last_input_shape_;
  last_input_shape_ = input_shape;
  return changed;
}

double PipelineStages::mean_loss(int m) {
  at::Tensor loss = loss_sum_ / static_cast<double>(m);
  distributed::WaitContext context(where() + "the loss from the last stage");
  // Every data-parallel rank's (the expert-parallel ones too).
  const auto& data = core_->data_parallel();
  if (is_last_stage() && data->size() > 1) data->all_reduce(loss, distributed::ReduceOp::avg)->wait();
  if (stages_ > 1) pp_->broadcast(loss, stages_ - 1)->wait();
  return loss.item<double>();
}

double PipelineStages::train_batch(const NextBatch& next_batch) {
  heartbeat::beat();
  const int m = executor_->schedule().micro_batches;
  read_batches(next_batch, m, "train_batch");
  // The first stage's input shape decides whether the links agree on shapes again.
  const bool changed = input_shape_changed();
  mode_ = Mode::train;
  loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  passes_ = weight_passes_ = 0;
  deferred_gemms_ = 0;  // read after the step: its count
  try {
    executor_->run(*this, changed);
  } catch (...) {
    inputs_.clear();
    outputs_.clear();
    deferred_.clear();
    throw;
  }
  return mean_loss(m);
}

void PipelineStages::run_forwards(const pipeline::Schedule& schedule, Mode mode) {
  heartbeat::beat();
  // A fresh executor: its links announce every shape (evaluation and each
  // generated token may differ from the step's), apart from training's.
  pipeline::ScheduleExecutor executor(schedule, pp_, control_, device_);
  const bool was_training = model_->is_training();
  model_->eval();
  c10::AutoGradMode no_grad(false);
  mode_ = mode;
  try {
    executor.run(*this, /*shapes_changed=*/true);
  } catch (...) {
    mode_ = Mode::train;
    model_->train(was_training);
    throw;
  }
  mode_ = Mode::train;
  model_->train(was_training);
}

double PipelineStages::eval_batch(const NextBatch& next_batch, int micro_batches) {
  if (micro_batches < 1) throw Error("eval_batch: " + std::to_string(micro_batches) + " micro-batches; at least 1");
  read_batches(next_batch, micro_batches, "eval_batch");
  loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  run_forwards(pipeline::make_forward_schedule(stages_, micro_batches, chunks_), Mode::eval);
  return mean_loss(micro_batches);
}

at::Tensor PipelineStages::next_token_logits(const at::Tensor& tokens) {
  if (!head_.input || !head_.logits)
    throw Error("generation under a pipeline needs the model's input and logits (a built-in causal LM)");
  if (tokens.dim() != 2 || tokens.size(0) != 1)
    throw Error("generation: tokens must be [1, n], got " + c10::str(tokens.sizes()));
  batches_.clear();
  layouts_.clear();
  if (is_first_stage()) batches_.push_back({head_.input(tokens).to(device_), at::Tensor()});
  logits_length_ = tokens.size(1);
  logits_ = at::Tensor();
  run_forwards(pipeline::make_forward_schedule(stages_, 1, chunks_), Mode::logits);
  // The last stage's row to every stage: its size first, then the values.
  at::Tensor size = at::zeros({1}, at::kLong);
  if (is_last_stage()) size[0] = logits_.numel();
  distributed::WaitContext context(where() + "the generated token's logits from the last stage");
  if (stages_ > 1) control_->broadcast(size, stages_ - 1)->wait();
  at::Tensor row = is_last_stage() ? logits_ : at::empty({size.item<int64_t>()}, at::kFloat);
  if (stages_ > 1) control_->broadcast(row, stages_ - 1)->wait();
  logits_ = at::Tensor();
  return row;
}

at::Tensor PipelineStages::forward(int micro, int chunk, const at::Tensor& input) {
  const int vs = chunk * stages_ + stage_;
  const bool first = vs == 0, last = vs == stages_ * chunks_ - 1;
  nn::SequenceLayoutScope packed(micro_layout_slot(micro), micro_layout_slot(micro) ? layouts_[micro] : std::nullopt);
  if (last && head_.targets) head_.targets(mode_ == Mode::logits ? at::Tensor() : batches_.at(micro).labels);
  if (mode_ != Mode::train) {  // forwards alone, without autograd (run_forwards)
    at::Tensor out = model_->run(first ? batches_.at(micro).inputs : input, partition_.begin(vs), partition_.end(vs));
    if (!last) return out;
    if (mode_ == Mode::eval)
      loss_sum_ += head_.loss(out, batches_.at(micro).labels).to(at::kFloat) * weights_.at(micro);
    else
      logits_ = head_.logits(out, logits_length_).select(1, logits_length_ - 1).squeeze(0).to(at::kFloat).cpu();
    return at::Tensor();
  }
  // Timed (wall_clock_breakdown) and, in the profiled step, observed by the flops profiler.
  ForwardBracket bracket(*core_);
  at::Tensor x;
  if (first) {
    x = batches_.at(micro).inputs;
  } else {
    x = input.detach().requires_grad_(true);
    inputs_[{micro, chunk}] = x;
  }
  at::Tensor out = run_chunk(x, partition_.begin(vs), partition_.end(vs));
  if (last) {
    at::Tensor l = head_.loss(out, batches_.at(micro).labels);
    if (weights_.at(micro) != 1.0) l = l * weights_[micro];
    bracket.close();
    loss_sum_ += l.detach().to(at::kFloat);
    outputs_[{micro, chunk}] = l;
    return at::Tensor();
  }
  bracket.close();
  outputs_[{micro, chunk}] = out;
  return out;
}

at::Tensor PipelineStages::run_chunk(const at::Tensor& input, size_t begin, size_t end) {
  const size_t interval = static_cast<size_t>(config_.pipeline.activation_checkpoint_interval);
  if (interval == 0) return model_->run(input, begin, end);
  // DeepSpeed's activation_checkpoint_interval: the chunk's layers in groups of
  // `interval`, each recomputed in backward. A layer whose input needs no
  // gradient (the embedding, reading token ids) runs plainly: nothing to recompute from.
  at::Tensor x = input;
  for (size_t i = begin; i < end;) {
    if (!x.requires_grad()) {
      x = model_->run(x, i, i + 1);
      ++i;
      continue;
    }
    const size_t j = std::min(end, i + interval);
    x = nn::checkpoint([this, i, j](const at::Tensor& in) { return model_->run(in, i, j); }, x);
    i = j;
  }
  return x;
}

at::Tensor PipelineStages::backward(int micro, int chunk, const at::Tensor& output_grad, bool input_only) {
  const int vs = chunk * stages_ + stage_;
  auto out_it = outputs_.find({micro, chunk});
  if (out_it == outputs_.end())
    throw Error("pipeline stage " + std::to_string(stage_) + ": backward of micro-batch " + std::to_string(micro) +
                " before its forward");
  at::Tensor out = std::move(out_it->second);
  outputs_.erase(out_it);
  const int passes = executor_->schedule().micro_batches * chunks_;
  ++passes_;
  // The backward recomputes checkpointed layers: the micro-batch's packed layout again.
  nn::SequenceLayoutScope packed(micro_layout_slot(micro), micro_layout_slot(micro) ? layouts_[micro] : std::nullopt);
  // A recomputed head takes its loss against this micro-batch's labels again
  // (other micro-batches' forwards may have run on this stage since).
  if (vs == stages_ * chunks_ - 1 && head_.targets) head_.targets(batches_.at(micro).labels);
  if (input_only) {
    // B: the weight GEMMs queue for W; the window closes after the last W.
    nn::DeferredWeightGrads& queue = deferred_[{micro, chunk}];
    nn::DeferWeightGrads defer(queue);
    core_->backward_pass(out, output_grad, /*boundary=*/false);
    deferred_gemms_ += static_cast<int64_t>(queue.size());
  } else {
    core_->backward_pass(out, output_grad, passes_ == passes);
  }
  if (vs == 0) return at::Tensor();
  auto in_it = inputs_.find({micro, chunk});
  at::Tensor g = in_it->second.grad();
  inputs_.erase(in_it);
  return g;
}

void PipelineStages::backward_weight(int micro, int chunk) {
  auto it = deferred_.find({micro, chunk});
  if (it == deferred_.end())
    throw Error("pipeline stage " + std::to_string(stage_) + ": W of micro-batch " + std::to_string(micro) +
                " before its B");
  core_->backward_weight_pass([&] { it->second.run(); });
  deferred_.erase(it);
  if (++weight_passes_ == executor_->schedule().micro_batches * chunks_) core_->close_backward_window();
}

void PipelineStages::reduce_tied() {
  distributed::WaitContext context(where() + "the data-parallel reductions and the tied gradients");
  core_->finish_gradients();
  if (!tied_group_ || tied_.empty()) return;
  zero::ZeroStrategy& strategy = core_->strategy();
  const std::vector<zero::FlatPiece> owned = strategy.owned_pieces();
  auto& segments = strategy.segments();
  for (int p : tied_) {
    const std::vector<ParamPiece> pieces = param_pieces(strategy.layout(), owned, p);
    const int64_t numel = strategy.layout().params()[p].numel;
    at::Tensor sum = at::zeros({numel}, segments.front().grad.options());
    for (const ParamPiece& piece : pieces)
      sum.narrow(0, piece.param_offset, piece.numel)
          .copy_(segments[piece.segment].grad.narrow(0, piece.segment_offset, piece.numel));
    tied_group_->all_reduce(sum, distributed::ReduceOp::sum)->wait();
    for (const ParamPiece& piece : pieces)
      segments[piece.segment].grad.narrow(0, piece.segment_offset, piece.numel)
          .copy_(sum.narrow(0, piece.param_offset, piece.numel));
  }
}

void PipelineStages::optimizer_step() {
  distributed::WaitContext context(where() + "the optimizer step (overflow and norm over every stage)");
  core_->pipeline_step();
}

std::string PipelineStages::where() const { return "pipeline stage " + std::to_string(stage_) + ": "; }

}  // namespace stratum
