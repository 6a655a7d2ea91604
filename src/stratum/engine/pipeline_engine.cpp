#include "stratum/engine/pipeline_engine.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "stratum/core/heartbeat.h"
#include "stratum/core/log.h"
#include "stratum/distributed/logged_communicator.h"
#include "stratum/distributed/wait_context.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/param_runs.h"
#include "stratum/models/causal_lm.h"
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

// This stage's parameters, drawn here when the model is a skeleton (born
// sharded: nn/deferred_init.h); the other stages' stay unmaterialized, or
// are freed (their storage set empty) when the model was built whole. Throws
// ConfigError when a parameter spans stages other than the first and the last
// (the tied embedding and head is the one sharing allowed).
StageParameters take_stage_parameters(nn::LayerStackImpl& model, std::vector<at::Tensor>& all_params,
                                      const std::vector<std::string>& all_names, const zero::LayerParams& layers,
                                      const pipeline::Partition& partition, int stage, int stages,
                                      const std::string& source, c10::Device device, at::ScalarType dtype) {
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
  // Born sharded: only this stage's parameters are ever drawn, one at a time.
  const std::set<std::string> mine(out.names.begin(), out.names.end());
  nn::materialize(model, device, dtype, [&](const std::string& name) { return mine.count(name) > 0; });
  return out;
}

}  // namespace

PipelineEngine::PipelineEngine(const Config& config, std::shared_ptr<nn::LayerStackImpl> model, StageLoss loss,
                               const distributed::DistContext& ctx)
    : PipelineEngine(config, std::move(model), std::move(loss), distributed::ProcessGrid::create(config, ctx)) {}

PipelineEngine::PipelineEngine(const Config& config, std::shared_ptr<nn::LayerStackImpl> model, StageLoss loss,
                               const distributed::ProcessGrid& grid)
    : config_(config),
      model_(std::move(model)),
      loss_(std::move(loss)),
      device_(engine_detail::device_of(grid)) {
  if (!model_) throw Error("stratum::initialize_pipeline: no model");
  // The grid checked the shape (ProcessGrid::problems): stages and TP divide the world, TP stays in a node.
  engine_detail::check_grid(config_, grid);
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

  const at::ScalarType dtype = engine_detail::training_dtype(config_);
  StageParameters mine = take_stage_parameters(*model_, all_params, all_names, all_layers, partition_, stage_, stages_,
                                               config_.source, device_, dtype);
  std::vector<at::Tensor>& params = mine.params;
  names_ = std::move(mine.names);
  tied_ = std::move(mine.tied);
  const bool any_tied = mine.any_tied;
  if (params.empty())
    throw ConfigError(config_.source, {"pipeline: stage " + std::to_string(stage_) + " holds layers " +
                                       pipeline::describe(partition_) + " but no trainable parameter"});

  engine_detail::prepare_module(*model_, device_, dtype, /*keep_trainable_params=*/false);
  pp_ = grid.pp_group();
  control_ = grid.cpu_pp_group();
  dp_ = engine_detail::logged_data_parallel(config_, grid.dp_group(), grid.cpu_dp_group());
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
    // and stage p-1 of each pipeline. Stages 1-2 partition them, each stage
    // differently: all ranks of both stages sum the pieces they hold.
    tied_group_ = grid.tied(config_.zero_optimization.stage == 0);
    c10::AutoGradMode no_grad(false);
    for (int i : tied_) {  // the group's first rank is a stage-0 rank (ProcessGrid::tied_groups)
      at::Tensor value = params[i].detach().clone();
      tied_group_->broadcast(value, 0)->wait();
      params[i].copy_(value);
    }
  }
  ModelParallelPlace reduction;
  reduction.stages = pp_;
  if (stage_ == stages_ - 1 && stages_ > 1) reduction.stage_duplicates = tied_;
  if (sharded) engine_detail::add_tensor_parallel(reduction, *sharded, names_);
  zero::LayerParams layers = layer_params(*model_, params);
  core_ = std::make_unique<EngineCore>(config_, params, names_, dtype, dp_, device_, std::move(layers), reduction);
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
              std::to_string(executor_->schedule().micro_batches) + " micro-batches a step; layers by stage " +
              pipeline::describe(partition_));
}

PipelineEngine::~PipelineEngine() = default;

double PipelineEngine::train_batch(const NextBatch& next_batch) {
  heartbeat::beat();
  const int m = executor_->schedule().micro_batches;
  batches_.clear();
  if (is_first_stage() || is_last_stage()) {
    for (int i = 0; i < m; ++i) {
      MicroBatch b = next_batch();
      if (!b.inputs.defined() || (is_last_stage() && !b.labels.defined()))
        throw Error("train_batch: micro-batch " + std::to_string(i) + " has no " +
                    (b.inputs.defined() ? "labels" : "inputs"));
      if (i > 0 && b.inputs.sizes() != batches_.front().inputs.sizes())
        throw Error("train_batch: micro-batch " + std::to_string(i) + " has inputs " + c10::str(b.inputs.sizes()) +
                    " but micro-batch 0 " + c10::str(batches_.front().inputs.sizes()) +
                    "; a step's micro-batches share one shape");
      b.inputs = engine_detail::cast_input(b.inputs.to(device_), core_->model_dtype());
      if (b.labels.defined()) b.labels = b.labels.to(device_);
      batches_.push_back(std::move(b));
    }
  }
  // The first stage's input shape decides whether the links agree on shapes again.
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
  // The loss: the last stage's mean over its micro-batches, averaged over data parallel, sent to every stage.
  at::Tensor loss = loss_sum_ / static_cast<double>(m);
  distributed::WaitContext context(where() + "the step's loss from the last stage");
  if (is_last_stage() && dp_->size() > 1) dp_->all_reduce(loss, distributed::ReduceOp::avg)->wait();
  if (stages_ > 1) pp_->broadcast(loss, stages_ - 1)->wait();
  return loss.item<double>();
}

at::Tensor PipelineEngine::forward(int micro, int chunk, const at::Tensor& input) {
  const int vs = chunk * stages_ + stage_;
  const bool first = vs == 0, last = vs == stages_ * chunks_ - 1;
  at::Tensor x;
  if (first) {
    x = batches_.at(micro).inputs;
  } else {
    x = input.detach().requires_grad_(true);
    inputs_[{micro, chunk}] = x;
  }
  at::Tensor out = run_chunk(x, partition_.begin(vs), partition_.end(vs));
  if (last) {
    at::Tensor l = loss_(out, batches_.at(micro).labels);
    loss_sum_ += l.detach().to(at::kFloat);
    outputs_[{micro, chunk}] = l;
    return at::Tensor();
  }
  outputs_[{micro, chunk}] = out;
  return out;
}

at::Tensor PipelineEngine::run_chunk(const at::Tensor& input, size_t begin, size_t end) {
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

at::Tensor PipelineEngine::backward(int micro, int chunk, const at::Tensor& output_grad, bool input_only) {
  const int vs = chunk * stages_ + stage_;
  auto out_it = outputs_.find({micro, chunk});
  if (out_it == outputs_.end())
    throw Error("pipeline stage " + std::to_string(stage_) + ": backward of micro-batch " + std::to_string(micro) +
                " before its forward");
  at::Tensor out = std::move(out_it->second);
  outputs_.erase(out_it);
  const int passes = executor_->schedule().micro_batches * chunks_;
  ++passes_;
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

void PipelineEngine::backward_weight(int micro, int chunk) {
  auto it = deferred_.find({micro, chunk});
  if (it == deferred_.end())
    throw Error("pipeline stage " + std::to_string(stage_) + ": W of micro-batch " + std::to_string(micro) +
                " before its B");
  it->second.run();
  deferred_.erase(it);
  if (++weight_passes_ == executor_->schedule().micro_batches * chunks_) core_->close_backward_window();
}

void PipelineEngine::reduce_tied() {
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

void PipelineEngine::optimizer_step() {
  distributed::WaitContext context(where() + "the optimizer step (overflow and norm over every stage)");
  core_->pipeline_step();
}

std::string PipelineEngine::where() const { return "pipeline stage " + std::to_string(stage_) + ": "; }

void PipelineEngine::save_checkpoint(const std::string& save_dir, const std::string& tag,
                                     const nlohmann::json& client_state) {
  stratum::save_checkpoint(*core_, save_dir, tag, client_state, {}, &place_);
}

nlohmann::json PipelineEngine::load_checkpoint(const std::string& load_dir, const std::string& tag) {
  return stratum::load_checkpoint(*core_, load_dir, tag, &place_);
}

std::unique_ptr<PipelineEngine> initialize_pipeline(const Config& config, std::shared_ptr<models::CausalLMImpl> model,
                                                    const distributed::ProcessGrid& grid) {
  models::CausalLMImpl* lm = model.get();  // the engine holds the model: it outlives the loss
  return std::make_unique<PipelineEngine>(
      config, model, [lm](const at::Tensor& out, const at::Tensor& labels) { return lm->loss(out, labels); }, grid);
}

std::unique_ptr<PipelineEngine> initialize_pipeline(const Config& config, std::shared_ptr<models::CausalLMImpl> model,
                                                    const distributed::DistContext& ctx) {
  return initialize_pipeline(config, std::move(model), distributed::ProcessGrid::create(config, ctx));
}

}  // namespace stratum
