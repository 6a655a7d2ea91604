#include "stratum/engine/engine_core.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "stratum/core/fs.h"
#include "stratum/core/heartbeat.h"
#include "stratum/core/log.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/logged_communicator.h"
#include "stratum/engine/flops_profiler.h"
#include "stratum/engine/param_runs.h"
#include "stratum/engine/phase_timers.h"
#include "stratum/optim/adam.h"
#include "stratum/optim/grad_clip.h"
#include "stratum/optim/host_adam.h"
#include "stratum/optim/lamb.h"
#include "stratum/optim/loss_scaler.h"
#include "stratum/optim/lr_schedule.h"

namespace stratum {
namespace {

zero::ZeroOptions zero_options(const Config& c, at::ScalarType model_dtype, c10::Device device) {
  zero::ZeroOptions o;
  o.stage = static_cast<int>(c.zero_optimization.stage);
  o.bucket_elems = c.zero_optimization.reduce_bucket_size;
  o.overlap_comm = c.zero_optimization.overlap_comm;
  o.reduce_scatter = c.zero_optimization.reduce_scatter;
  o.prescale_gradients = c.prescale_gradients;
  o.gradient_predivide_factor = c.gradient_predivide_factor;
  o.prefetch_elems = c.zero_optimization.stage3_prefetch_bucket_size;
  o.persistence_threshold = c.zero_optimization.stage3_param_persistence_threshold;
  o.max_live_elems = c.zero_optimization.stage3_max_live_parameters;
  o.max_reuse_distance = c.zero_optimization.stage3_max_reuse_distance;
  o.offload_optimizer = c.zero_optimization.offload_optimizer.device == config::OffloadDevice::cpu;
  o.offload_param = c.zero_optimization.offload_param.device == config::OffloadDevice::cpu;
  o.pin_memory = c.zero_optimization.offload_optimizer.pin_memory;
  o.device_params16 = !o.offload_optimizer && model_dtype != at::kFloat && optim::mixed_adam_available(device);
  o.overlap_param_gather = c.zero_optimization.overlap_param_gather;
  o.fuse_weight_grads = c.zero_optimization.gradient_accumulation_fusion;
  o.grad_accum_fp32 = c.grad_accum_fp32;
  o.reduce_at_window_end = c.pipeline.stages > 1 && c.pipeline.schedule == config::PipelineSchedule::zb_h1;
  // 16-bit gradients travel in fp32 unless communication_data_type says otherwise.
  if (c.communication_data_type)
    o.comm_dtype = *c.communication_data_type == config::DType::bf16   ? at::kBFloat16
                   : *c.communication_data_type == config::DType::fp16 ? at::kHalf
                                                                       : at::kFloat;
  else
    o.comm_dtype = at::kFloat;
  return o;
}

// Checks that need no communication, so every rank fails the same way before any collective.
void check_supported(const Config& c, const std::vector<at::Tensor>& params, bool layer_stack, bool pipeline_stage,
                     int64_t tensor_parallel_size) {
  if (c.pipeline.stages > 1 && !pipeline_stage)
    throw ConfigError(c.source, {"pipeline.stages: " + std::to_string(c.pipeline.stages) +
                                 " stages: build the engine with stratum::initialize over the process grid, which "
                                 "cuts the model into its stages, and train with train_batch"});
  // What a pipeline cannot do is refused when the config is read (config::check_pipeline_rules).
  if (c.tensor_parallel.size != tensor_parallel_size)
    throw ConfigError(c.source, {"tensor_parallel.autotp_size: " + std::to_string(c.tensor_parallel.size) +
                                 " but the model is sharded over " + std::to_string(tensor_parallel_size) +
                                 " rank" + (tensor_parallel_size == 1 ? "" : "s") +
                                 "; build it over stratum::tensor_parallel_group(config, context) "
                                 "(models::build_model(model_config, device, group)) and pass the DistContext "
                                 "to stratum::initialize"});
  if (c.zero_optimization.stage == 3 && !layer_stack)
    throw ConfigError(c.source, {"zero_optimization.stage: 3 needs a model built as a stratum::nn::LayerStack (ZeRO-3 "
                                 "gathers each layer's parameters around the layer, so the engine must run the layers "
                                 "one by one); use stage 2, or build the model as a LayerStack"});
  if (c.activation_checkpointing.enabled && !layer_stack)
    throw ConfigError(c.source, {"activation_checkpointing: the engine checkpoints the layers of a stratum::nn::LayerStack "
                                 "model; for another model remove the section and call stratum::nn::checkpoint() "
                                 "in its forward()"});
  if (params.empty())
    throw Error("stratum::initialize: the model has no trainable parameters (none with requires_grad); nothing to train");
}

}  // namespace

EngineCore::EngineCore(const Config& config, std::vector<at::Tensor> params, std::vector<std::string> names,
                       at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp, c10::Device device,
                       std::optional<zero::LayerParams> layers, std::optional<ModelParallelPlace> model_parallel,
                       std::function<at::Tensor(int)> initial_value)
    : config_(config), mp_(std::move(model_parallel)), model_dtype_(model_dtype), dp_(std::move(dp)), device_(device) {
  if (!config_.optimizer) config_.optimizer = config::OptimizerConfig{};  // config::default_optimizer_note
  check_supported(config_, params, layers.has_value(), pipeline_stage(),
                  mp_ && mp_->tensor_parallel ? mp_->tensor_parallel->size() : 1);
  // Under model parallelism the data-parallel group is world / (stages x tensor parallel).
  batch_ = config_.resolve_batch(data_parallel()->size() *
                                 (mp_ ? config_.pipeline.stages * config_.tensor_parallel.size : 1));
  if (mp_ && mp_->expert_parallel && config_.optimizer->type == config::OptimizerType::Lamb)
    throw ConfigError(config_.source, {"optimizer.type: Lamb's per-parameter trust ratios are not computed under "
                                       "expert parallelism (moe.expert_parallel_size " +
                                       std::to_string(mp_->expert_parallel->size()) + "); use Adam or AdamW"});
  zero::ZeroOptions options = zero_options(config_, model_dtype_, device);
  options.initial_value = std::move(initial_value);
  // LayerStack models, for the layers that declare the fused GEMM's contract
  // (StackLayer::linear_weights_fusable).
  // Parameters another layer reads too (a tied embedding): never fused; their
  // exchanged rows are added to a reduced dense part.
  std::unordered_set<int> shared;
  if (layers)
    for (const auto& borrowed : layers->borrowed) shared.insert(borrowed.begin(), borrowed.end());
  options.fuse_weight_grads = options.fuse_weight_grads && layers.has_value();
  if (options.fuse_weight_grads)
    for (int p : layers->fusable)
      if (!shared.count(p)) options.fused_params.push_back(p);
  if (layers && options.stage < 3 && config_.sparse_gradients) {
    options.row_gradient_params = layers->row_fed;
    for (int p : layers->row_fed)
      if (shared.count(p)) options.row_dense_params.push_back(p);
  }
  if (options.stage == 3)
    strategy_ = zero::make_stage3(options, *layers, std::move(params), std::move(names), model_dtype_, dp_, device);
  else
    strategy_ = zero::make_zero_strategy(options, std::move(params), std::move(names), model_dtype_, dp_,
                                         layers ? &*layers : nullptr);
  check_partial_gradients();
  for (auto& seg : strategy_->segments()) adam_.push_back(optim::make_adam_state(seg.master));
  if (config_.optimizer->type == config::OptimizerType::Lamb) {
    // Lamb's trust ratio is per parameter: which parameters' elements each segment holds.
    const auto& layout = strategy_->layout();
    auto runs = segment_param_runs(layout, strategy_->owned_pieces(), strategy_->segments().size());
    for (size_t i = 0; i < runs.size(); ++i) {
      const at::Tensor& master = strategy_->segments()[i].master;
      lamb_runs_.emplace_back(std::move(runs[i]), master.numel(), static_cast<int64_t>(layout.params().size()),
                              master.device());
    }
  }
  if (options.offload_optimizer)
    host_adam_ = std::make_unique<optim::HostAdam>(*config_.optimizer,
                                                   config_.zero_optimization.offload_optimizer.cpuadam_cores_perc,
                                                   distributed::local_world_size_from_env());
  scheduler_ = std::make_unique<optim::LrScheduler>(config_.scheduler, config_.optimizer->lr);
  config::Fp16Config fp16 = config_.fp16;
  if (!fp16.enabled) fp16.loss_scale = 1.0;  // static 1: no scaling outside fp16
  scaler_ = std::make_unique<optim::LossScaler>(fp16, dp_->rank() == 0);
  if (config_.dump_state && dp_->rank() == 0)
    log::info(config_.source + ": resolved config\n" + to_json(config_, dp_->size()).dump(2));
  if (config_.wall_clock_breakdown || config_.flops_profiler.enabled) timers_ = std::make_unique<PhaseTimers>(device_);
}

EngineCore::~EngineCore() {
  try {
    sink_ = nullptr;  // what it pointed into (a progress display) may be gone by now
    log_comms_summary();
  } catch (...) {  // a destructor reports nothing it cannot
  }
}

void EngineCore::log_comms_summary() {
  auto* logged = dynamic_cast<distributed::LoggedCommunicator*>(dp_.get());
  if (!logged || !config_.comms_logger.enabled || logged->comms_log()->total_count() == 0) return;
  if (dp_->rank() == 0)
    report("communication summary at step " + std::to_string(global_steps_) + "\n" + logged->comms_log()->summary());
  logged->comms_log()->reset();
}

void EngineCore::check_every_parameter_reached() const {
  const std::vector<std::string> missing = strategy_->parameters_without_gradient();
  if (missing.empty()) return;
  std::string names;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) names += (i ? ", " : "") + missing[i];
  if (missing.size() > 8) names += ", ... (" + std::to_string(missing.size()) + " in all)";
  throw Error(config_.source + ": zero_optimization.ignore_unused_parameters is false, and " +
              std::to_string(missing.size()) + " trainable parameter" + (missing.size() == 1 ? "" : "s") +
              " got no gradient in the accumulation window ending at step " + std::to_string(global_steps_ + 1) +
              " on rank " + std::to_string(dp_->rank()) + ": " + names +
              "; set it true (DeepSpeed's default: they train with zero gradients) or freeze them (requires_grad false)");
}

double EngineCore::lr() const { return scheduler_->lr(); }
double EngineCore::loss_scale() const { return scaler_->scale(); }

bool EngineCore::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % batch_.gradient_accumulation_steps == 0;
}

void EngineCore::backward(const at::Tensor& loss) {
  if (!loss.defined() || loss.numel() != 1)
    throw Error("engine.backward: expected a scalar loss, got a tensor of " +
                std::to_string(loss.defined() ? loss.numel() : 0) + " elements");
  heartbeat::beat();
  const bool timed = timing();
  if (timed) timers_->start(Phase::bwd_inner);
  strategy_->prepare_backward(is_gradient_accumulation_boundary());
  // Gradients are averaged over the accumulation window; fp16 scales the loss up.
  const double factor = loss_factor();
  if (observer_) observer_->before_backward(factor);
  at::Tensor scaled = factor == 1.0 ? loss : loss * factor;
  torch::autograd::backward({scaled});
  if (timed) {
    timers_->stop(Phase::bwd_inner);
    timers_->start(Phase::bwd_allreduce);
  }
  strategy_->finish_backward();
  if (frozen_) frozen_->release_all();
  if (timed) timers_->stop(Phase::bwd_allreduce);
}

void EngineCore::backward_pass(const at::Tensor& output, const at::Tensor& grad, bool boundary) {
  heartbeat::beat();
  const bool timed = timing();
  if (timed) timers_->start(Phase::bwd_inner);
  strategy_->prepare_backward(boundary);
  // The last stage multiplies its loss by this; the others receive gradients scaled alike.
  const double factor = loss_factor();
  if (observer_) observer_->before_backward(factor);
  if (grad.defined()) {
    torch::autograd::backward({output}, {grad});
  } else {
    if (!output.defined() || output.numel() != 1)
      throw Error("pipeline backward: the last stage's loss must be a scalar, got " +
                  std::to_string(output.defined() ? output.numel() : 0) + " elements");
    torch::autograd::backward({factor == 1.0 ? output : output * factor});
  }
  if (timed) {
    timers_->stop(Phase::bwd_inner);
    timers_->start(Phase::bwd_allreduce);
  }
  strategy_->finish_backward();
  if (frozen_) frozen_->release_all();
  if (timed) timers_->stop(Phase::bwd_allreduce);
}

double EngineCore::loss_factor() const {
  // Expert-parallel ranks read different data but the core averages over its
  // own group only: their share of the mean is divided in here.
  const double ep = mp_ && mp_->expert_parallel ? static_cast<double>(mp_->expert_parallel->size()) : 1.0;
  return scaler_->scale() / static_cast<double>(batch_.gradient_accumulation_steps) / ep;
}

void EngineCore::backward_weight_pass(const std::function<void()>& run) {
  const bool timed = timing();
  if (timed) timers_->start(Phase::bwd_inner);
  run();
  if (timed) timers_->stop(Phase::bwd_inner);
}

void EngineCore::close_backward_window() {
  const bool timed = timing();
  if (timed) timers_->start(Phase::bwd_allreduce);
  strategy_->prepare_backward(/*boundary=*/true);
  strategy_->finish_backward();
  if (frozen_) frozen_->release_all();
  if (timed) timers_->stop(Phase::bwd_allreduce);
}

void EngineCore::finish_gradients() {
  if (gradients_finished_) return;
  heartbeat::start_watch();
  heartbeat::beat();
  const bool timed = timing();
  // Waiting for the window's reductions is backward's time (phase_timers.h).
  if (timed) timers_->start(Phase::bwd_allreduce);
  micro_steps_ += batch_.gradient_accumulation_steps;
  strategy_->wait_gradients();
  reduce_partial_gradients();
  if (timed) timers_->stop(Phase::bwd_allreduce);
  gradients_finished_ = true;
}

bool EngineCore::pipeline_step() {
  // Decided before the step counts: the step in progress is global_steps_.
  const bool timed = timing(), profiled = profiling();
  finish_gradients();
  gradients_finished_ = false;
  if (timed) timers_->start(Phase::step);
  const bool updated = optimizer_step();
  if (timed) {
    timers_->stop(Phase::step);
    for (int64_t i = 0; i < batch_.gradient_accumulation_steps; ++i) timers_->end_micro_step();
  }
  if (timed || profiled) finish_step_diagnostics(profiled);
  return updated;
}

bool EngineCore::step() {
  // Training has begun: from here a rank that stops making progress ends the
  // job under stratum-run (--heartbeat_timeout).
  heartbeat::start_watch();
  heartbeat::beat();
  const bool boundary = is_gradient_accumulation_boundary();
  // Decided before the step counts: the step in progress is global_steps_.
  const bool timed = timing(), profiled = profiling();
  ++micro_steps_;
  bool updated = false;
  if (boundary) {
    // Waiting for the window's reductions is backward's time (phase_timers.h).
    if (timed) timers_->start(Phase::bwd_allreduce);
    strategy_->wait_gradients();
    reduce_partial_gradients();
    if (timed) {
      timers_->stop(Phase::bwd_allreduce);
      timers_->start(Phase::step);
    }
    updated = optimizer_step();
  } else if (timed) {
    timers_->start(Phase::step);
  }
  if (timed) {
    timers_->stop(Phase::step);
    timers_->end_micro_step();
  }
  if (boundary && (timed || profiled)) finish_step_diagnostics(profiled);
  return updated;
}

bool EngineCore::optimizer_step() {
  strategy_->wait_params();  // the last step's gathers read the slices this one rewrites
  if (!config_.zero_optimization.ignore_unused_parameters) check_every_parameter_reached();
  strategy_->forget_reached();
  last_skipped_ = false;
  // The scale the window's backward passes used; update() may change it.
  const double scale = scaler_->scale();
  const bool overflow = config_.fp16.enabled && check_overflow();
  if (scaler_->update(overflow)) {
    last_skipped_ = true;
    ++skipped_steps_;
    ++global_steps_;
    strategy_->zero_gradients();
    if (observer_) observer_->after_step(/*updated=*/false);
    return false;
  }
  last_grad_norm_ = global_grad_norm(scale);
  // Unscaling and clipping in one factor, applied inside the Adam kernel; it
  // stays on the device, so the host queues the update without waiting.
  apply_optimizer(scale / optim::clip_coefficient(last_grad_norm_, config_.gradient_clipping));
  strategy_->publish_params();
  strategy_->zero_gradients();
  scheduler_->step();
  ++global_steps_;
  if (observer_) observer_->after_step(/*updated=*/true);
  if (config_.comms_logger.verbose && global_steps_ % config_.steps_per_print.value_or(10) == 0) log_comms_summary();
  return true;
}

bool EngineCore::check_overflow() {
  std::vector<at::Tensor> grads;
  for (auto& s : strategy_->segments()) grads.push_back(s.grad);
  at::Tensor flag = optim::local_overflow_flag(grads).to(strategy_->segments().front().grad.device());
  dp_->all_reduce(flag, distributed::ReduceOp::max)->wait();
  if (mp_ && mp_->tensor_parallel) mp_->tensor_parallel->all_reduce(flag, distributed::ReduceOp::max)->wait();
  if (mp_ && mp_->expert_parallel) mp_->expert_parallel->all_reduce(flag, distributed::ReduceOp::max)->wait();
  if (mp_ && mp_->stages) mp_->stages->all_reduce(flag, distributed::ReduceOp::max)->wait();
  return flag.item<float>() > 0;
}

void EngineCore::check_partial_gradients() {
  if (!mp_) return;
  const std::vector<zero::FlatPiece> owned = strategy_->owned_pieces();
  for (const auto& partial : mp_->partial) {
    int64_t n = 0;
    for (int p : partial.params)
      for (const ParamPiece& piece : param_pieces(strategy_->layout(), owned, p)) n += piece.numel;
    at::Tensor counts = at::tensor({n, -n}, at::kLong).to(strategy_->segments().front().grad.device());
    partial.group->all_reduce(counts, distributed::ReduceOp::max)->wait();
    const int64_t most = counts[0].item<int64_t>(), least = -counts[1].item<int64_t>();
    if (most != least)
      throw Error("tensor parallel: the ranks that sum partial gradients hold " + std::to_string(least) + " to " +
                  std::to_string(most) + " of their elements (this rank " + std::to_string(n) +
                  "); their parameters must have the same shapes and ZeRO layout on every rank of the group");
  }
}

void EngineCore::reduce_partial_gradients() {
  if (!mp_) return;
  const std::vector<zero::FlatPiece> owned = strategy_->owned_pieces();
  auto& segments = strategy_->segments();
  for (const auto& partial : mp_->partial) {
    // This rank's pieces of them (its data-parallel part), one all-reduce for all.
    std::vector<at::Tensor> views;
    for (int p : partial.params)
      for (const ParamPiece& piece : param_pieces(strategy_->layout(), owned, p))
        views.push_back(segments[piece.segment].grad.narrow(0, piece.segment_offset, piece.numel));
    at::Tensor flat = views.empty() ? at::empty({0}, segments.front().grad.options()) : at::cat(views);
    partial.group->all_reduce(flat, distributed::ReduceOp::sum)->wait();
    int64_t at_elem = 0;
    for (at::Tensor& v : views) {
      v.copy_(flat.narrow(0, at_elem, v.numel()));
      at_elem += v.numel();
    }
  }
}

at::Tensor EngineCore::global_grad_norm(double loss_scale) {
  // Computed during backward as the reductions landed, where the strategy could.
  // (Not under a pipeline, whose tied gradients change after the reductions,
  // nor where partial gradients are summed after them.)
  const bool reduced = !pipeline_stage() && (!mp_ || mp_->partial.empty());
  at::Tensor sq = reduced ? strategy_->reduced_grad_sq_norm() : at::Tensor();
  if (!sq.defined()) {
    std::vector<at::Tensor> grads;
    for (auto& s : strategy_->segments()) grads.push_back(s.grad);
    sq = optim::squared_norm(grads).to(strategy_->segments().front().grad.device());
  }
  bool subtracted = false;
  if (mp_ && (!mp_->stage_duplicates.empty() || !mp_->tp_duplicates.empty())) {  // counted on another rank
    std::vector<at::Tensor> excluded;
    const std::vector<zero::FlatPiece> owned = strategy_->owned_pieces();
    // Once each: a parameter can be a duplicate twice over (the last stage's
    // copy of a tied embedding on an expert-parallel rank other than the first).
    std::set<int> duplicates(mp_->stage_duplicates.begin(), mp_->stage_duplicates.end());
    duplicates.insert(mp_->tp_duplicates.begin(), mp_->tp_duplicates.end());
    for (int p : duplicates)
      for (const ParamPiece& piece : param_pieces(strategy_->layout(), owned, p))
        excluded.push_back(strategy_->segments()[piece.segment].grad.narrow(0, piece.segment_offset, piece.numel));
    if (!excluded.empty()) {
      sq = sq - optim::squared_norm(excluded).to(sq.device());
      subtracted = true;
    }
  }
  // Partitioned gradients: each rank holds a disjoint part of the sum.
  if (strategy_->partitioned()) dp_->all_reduce(sq, distributed::ReduceOp::sum)->wait();
  if (mp_ && mp_->tensor_parallel) mp_->tensor_parallel->all_reduce(sq, distributed::ReduceOp::sum)->wait();
  if (mp_ && mp_->expert_parallel) mp_->expert_parallel->all_reduce(sq, distributed::ReduceOp::sum)->wait();
  if (mp_ && mp_->stages) mp_->stages->all_reduce(sq, distributed::ReduceOp::sum)->wait();
  return (subtracted ? sq.clamp_min(0) : sq).sqrt() / loss_scale;
}

double EngineCore::last_grad_norm() const { return last_grad_norm_.defined() ? last_grad_norm_.item<double>() : 0.0; }

void EngineCore::apply_optimizer(const at::Tensor& grad_scale) {
  // The host's Adam needs the factor on the host: one read for every segment.
  const double host_grad_scale = host_adam_ ? grad_scale.item<double>() : 1.0;
  const at::Tensor trust_ratios = lamb_runs_.empty() ? at::Tensor() : lamb_trust_ratios(grad_scale, host_grad_scale);
  // Last segment first: at stages 1/2 each segment's all-gather starts as soon
  // as it is updated, and the last bucket holds the layers the next forward reads first.
  for (size_t i = strategy_->segments().size(); i-- > 0;) {
    update_segment(i, grad_scale, host_grad_scale, trust_ratios);
    strategy_->segment_updated(i);
  }
}

at::Tensor EngineCore::lamb_trust_ratios(const at::Tensor& grad_scale, double host_grad_scale) {
  auto& segments = strategy_->segments();
  const int64_t num_params = static_cast<int64_t>(strategy_->layout().params().size());
  const std::optional<double> beta1 = scheduler_->beta1();
  at::Tensor sq;
  if (host_adam_) {
    sq = at::zeros({2, num_params}, at::TensorOptions().dtype(at::kDouble));
    double* sums = sq.data_ptr<double>();
    for (size_t i = 0; i < segments.size(); ++i)
      host_adam_->lamb_moments(segments[i].master, segments[i].grad, adam_[i], lamb_runs_[i].runs(), beta1,
                               host_grad_scale, sums, sums + num_params);
  } else {
    sq = optim::lamb_norms_buffer(num_params, segments.front().master.device());
    for (size_t i = 0; i < segments.size(); ++i)
      optim::lamb_moments(segments[i].master, segments[i].grad, adam_[i], lamb_runs_[i], *config_.optimizer, beta1,
                          grad_scale, sq);
  }
  // Each rank holds a disjoint part of every parameter: one all-reduce of the
  // 2 x parameters partial norms (on the gradients' device: the DP communicator's).
  const bool tensor_parallel = mp_ && mp_->tensor_parallel;
  if (strategy_->partitioned() || tensor_parallel) {
    at::Tensor wire = sq.to(segments.front().grad.device());
    if (strategy_->partitioned()) dp_->all_reduce(wire, distributed::ReduceOp::sum)->wait();
    if (tensor_parallel) {
      // A split parameter's norms are the sum of its shards'; a replicated
      // one's are its first holder's (every holder has the same values).
      for (int p : mp_->tp_duplicates) wire.select(1, p).zero_();
      mp_->tensor_parallel->all_reduce(wire, distributed::ReduceOp::sum)->wait();
    }
    sq = wire.to(sq.device());
  }
  return optim::lamb_trust_ratios(sq, *config_.optimizer);
}

void EngineCore::update_segment(size_t i, const at::Tensor& grad_scale, double host_grad_scale,
                                const at::Tensor& trust_ratios) {
  zero::OptimizerSegment& seg = strategy_->segments()[i];
  const double lr = scheduler_->lr();
  const std::optional<double> beta1 = scheduler_->beta1();
  if (trust_ratios.defined()) {  // Lamb: the second pass
    if (host_adam_) {
      const at::Tensor ratios = trust_ratios.contiguous();
      host_adam_->lamb_update(seg.master, seg.params16, adam_[i], lamb_runs_[i].runs(), lr, beta1,
                              ratios.const_data_ptr<double>());
    } else {
      optim::lamb_update(seg.master, adam_[i], lamb_runs_[i], *config_.optimizer, lr, beta1, trust_ratios,
                         seg.params16);
    }
    return;
  }
  if (host_adam_) {
    host_adam_->step(seg.master, seg.grad, seg.params16, adam_[i], lr, beta1, host_grad_scale);
    return;
  }
  if (optim::mixed_adam_available(seg.master.device())) {  // one pass, no widened copy
    optim::adam_step_mixed(seg.master, seg.grad, adam_[i], *config_.optimizer, lr, beta1, grad_scale, seg.params16);
    return;
  }
  if (seg.grad.scalar_type() == at::kFloat) {
    optim::adam_step(seg.master, seg.grad, adam_[i], *config_.optimizer, lr, beta1, grad_scale);
    return;
  }
  // 16-bit gradients are widened to fp32 a chunk at a time: a whole fp32 copy
  // would add 4Ψ/N bytes at the peak (at ZeRO-3 on 2 GPUs, the difference
  // between a 16B-parameter model fitting or not).
  constexpr int64_t kChunk = int64_t{1} << 27;
  const int64_t n = seg.master.numel();
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t len = std::min(kChunk, n - off);
    // Each chunk starts from the step count before this step; the count moves once, below.
    optim::AdamState part{adam_[i].exp_avg.narrow(0, off, len), adam_[i].exp_avg_sq.narrow(0, off, len),
                          adam_[i].step.clone()};
    at::Tensor master = seg.master.narrow(0, off, len);
    optim::adam_step(master, seg.grad.narrow(0, off, len).to(at::kFloat), part, *config_.optimizer, lr, beta1,
                     grad_scale);
  }
  adam_[i].step.add_(1);
}

ModelStateBytes EngineCore::model_state_bytes() const {
  zero::ModelStateBytes z = strategy_->bytes();
  ModelStateBytes b{z.params, z.grads, z.master, 0};
  for (const auto& a : adam_) b.optimizer += a.exp_avg.nbytes() + a.exp_avg_sq.nbytes();
  return b;
}

bool EngineCore::timing() const {
  return timers_ && (config_.wall_clock_breakdown || profiling());
}

bool EngineCore::profiling() const {
  return profiler_ && global_steps_ == config_.flops_profiler.profile_step;
}

void EngineCore::begin_forward() {
  if (!timers_ && !profiler_) return;
  forward_timed_ = forward_profiled_ = false;
  if (!c10::GradMode::is_enabled()) return;  // evaluation, not a micro-step
  forward_timed_ = timing();
  forward_profiled_ = profiling();
  if (forward_timed_) timers_->start(Phase::fwd);
  if (forward_profiled_) profiler_->start();
}

void EngineCore::end_forward() {
  if (forward_profiled_) profiler_->stop();
  if (forward_timed_) timers_->stop(Phase::fwd);
  forward_timed_ = forward_profiled_ = false;
}

void EngineCore::cancel_forward() noexcept {
  if (forward_profiled_) profiler_->cancel();
  if (forward_timed_) timers_->cancel(Phase::fwd);
  forward_timed_ = forward_profiled_ = false;
}

void EngineCore::attach_flops_profiler(ModelOutline outline) {
  if (!config_.flops_profiler.enabled || dp_->rank() != 0) return;
  profiler_ = std::make_unique<FlopsProfiler>(config_.flops_profiler, std::move(outline), device_);
}

void EngineCore::attach_frozen_units(std::unique_ptr<zero::FrozenUnits> units) { frozen_ = std::move(units); }

void EngineCore::report(const std::string& text) {
  if (sink_) {
    sink_(text);
    return;
  }
  std::fprintf(stdout, "%s\n", text.c_str());
  std::fflush(stdout);
}

void EngineCore::finish_step_diagnostics(bool profiled) {
  if (profiled) {
    FlopsProfiler::StepFacts f;
    f.profile_step = config_.flops_profiler.profile_step;
    f.mp_size = config_.pipeline.stages * config_.tensor_parallel.size;  // context parallelism is inside dp
    f.dp_size = dp_->size();
    f.world_size = f.dp_size * f.mp_size;
    f.micro_batch = batch_.micro_batch_per_gpu;
    f.gradient_accumulation_steps = batch_.gradient_accumulation_steps;
    f.fwd_seconds = timers_->step_seconds(Phase::fwd);
    f.bwd_seconds = timers_->step_bwd_seconds();
    f.step_seconds = timers_->step_seconds(Phase::step);
    std::string text = profiler_->report(f);
    const std::string& file = config_.flops_profiler.output_file;
    if (file.empty()) {
      while (!text.empty() && text.back() == '\n') text.pop_back();
      report(text);
    } else {
      const size_t slash = file.rfind('/');
      if (slash != std::string::npos && slash > 0) fs::make_directories(file.substr(0, slash));
      fs::write_file_atomically(file, text, "the flops profile");
      report("flops profiler: the profile of step " + std::to_string(f.profile_step) + " is in " + file);
    }
  }
  if (!config_.wall_clock_breakdown) {
    timers_->reset_step();  // timed for the profile only
    return;
  }
  timers_->end_step();
  // DeepSpeed's steps_per_print default: 10.
  const int64_t every = std::max<int64_t>(1, config_.steps_per_print.value_or(10));
  if (global_steps_ % every != 0) return;
  const std::vector<std::string> lines = timers_->report();  // every rank: each starts a new interval
  if (dp_->rank() == 0)
    for (const auto& line : lines) report(line);
}

TrainingState EngineCore::training_state() {
  return TrainingState{*strategy_, adam_, *scheduler_, *scaler_, global_steps_, micro_steps_, skipped_steps_,
                       config_.zero_optimization.stage3_gather_16bit_weights_on_model_save,
                       config_.zero_optimization.load_from_fp32_weights,
                       config_.zero_optimization.offload_optimizer.device == config::OffloadDevice::cpu,
                       config_.zero_optimization.offload_param.device == config::OffloadDevice::cpu};
}

}  // namespace stratum
