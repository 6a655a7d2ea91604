#pragma once
// The training step, independent of the model's type: a thin orchestrator over
// a ZeRO strategy (where parameters, gradients and master weights live and how
// they are reduced), the optimizer states, the LR schedule and the loss scaler.
// Engine<Model> (engine.h) puts the model's forward in front of it.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/config/config.h"
#include "stratum/distributed/communicator.h"
#include "stratum/nn/tensor_parallel/shard_spec.h"
#include "stratum/zero/frozen_units.h"
#include "stratum/zero/strategy.h"

namespace stratum {
class FlopsProfiler;
class PhaseTimers;
struct ModelOutline;
namespace optim {
class LossScaler;
class LrScheduler;
class HostAdam;
class LambRuns;
struct AdamState;
}  // namespace optim

// What a checkpoint (checkpoint/checkpoint.h) saves and restores of the core: the
// strategy's segments (fp32 masters, the flat layout, this rank's pieces),
// Adam's moments and step per segment, the step counters, the LR schedule and
// the loss scaler; and whether a save also writes the whole model in 16 bits.
struct TrainingState {
  zero::ZeroStrategy& strategy;
  std::vector<optim::AdamState>& adam;  // one per segment
  optim::LrScheduler& scheduler;
  optim::LossScaler& scaler;
  int64_t& global_steps;
  int64_t& micro_steps;
  int64_t& skipped_steps;
  bool gather_16bit_weights_on_save;  // zero_optimization.stage3_gather_16bit_weights_on_model_save
  bool load_from_fp32_weights;        // zero_optimization.load_from_fp32_weights
  bool offload_optimizer, offload_param;  // recorded in the manifest: the layout it was saved at
};

// What follows the training step from the model's side (a mixture of
// experts' routing, engine/moe_routing.h): told the factor each backward
// multiplies the loss by, and run after each optimizer step.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void before_backward(double loss_factor) = 0;
  // `updated`: false when the step was skipped (fp16 overflow).
  virtual void after_step(bool updated) = 0;
  // What it moves across steps that a checkpoint holds (named arrays, the
  // same on every data-parallel rank), and its restoring from a checkpoint
  // holding every rank's: each observer takes the names it knows.
  virtual std::map<std::string, std::vector<double>> saved_state() const { return {}; }
  virtual void load_state(const std::map<std::string, std::vector<double>>& state) { (void)state; }
};

// Where the core's parameters sit when the model is split over other ranks
// too (pipeline stages, tensor-parallel shards): what a step reduces beyond
// the data-parallel group, so that every rank takes the same decision and the
// norm counts each element once, and what a checkpoint needs to write shards
// that load at any layout.
struct ModelParallelPlace {
  // This rank's tensor-parallel group (null: none) and pipeline group (null:
  // not a pipeline stage), on the gradients' device: the overflow flag (max)
  // and the gradient norm's square (sum) are reduced over each.
  std::shared_ptr<distributed::Communicator> tensor_parallel, stages;
  // Parameters (indices into the core's list) another rank already counts in
  // the norm: the last stage's copy of a tied embedding (`stage_duplicates`);
  // a replicated parameter on every tensor-parallel rank but its first holder
  // (`tp_duplicates`).
  std::vector<int> stage_duplicates, tp_duplicates;
  // Gradients each rank of `group` computes a part of (sequence-parallel
  // norms, a key/value head several ranks share): summed over it after the
  // data-parallel reduction, before anything reads them.
  struct PartialGradients {
    std::shared_ptr<distributed::Communicator> group;
    std::vector<int> params;
  };
  std::vector<PartialGradients> partial;
  // Tensor parallelism, for checkpoints: this rank's index in its group and
  // how each parameter is cut from the whole tensor (nullopt: replicated);
  // the job's ranks (a save's and a load's agreement); on data-parallel rank
  // 0 of each tensor-parallel index, those ranks in group order on the CPU
  // (the manifest's parts travel over it), null on the others.
  int64_t tp_rank = 0;
  std::vector<std::optional<nn::tp::ShardSpec>> tp_specs;
  // Expert parallelism (cut from data parallelism, distributed/process_grid.h):
  // the group a mixture of experts' layers are split over. Its ranks read
  // different data: the norm and the overflow flag are reduced over it, the
  // parameters outside the experts summed over it (`partial`, counted once:
  // `tp_duplicates`), and every gradient divided by its size. The core's own
  // group is then the experts' data-parallel one.
  std::shared_ptr<distributed::Communicator> expert_parallel;
  // Every rank that reads data of its own for this model piece (null: the
  // core's group): the step's mean loss and its token weights.
  std::shared_ptr<distributed::Communicator> data_parallel;
  // Expert parallelism, for checkpoints: every parameter name of the whole
  // model (the experts other ranks hold too).
  std::vector<std::string> model_params;
  std::shared_ptr<distributed::Communicator> world, tp_leaders;
};

struct ModelStateBytes {
  int64_t params = 0, grads = 0, master = 0, optimizer = 0;
  int64_t total() const { return params + grads + master + optimizer; }
};

class EngineCore {
 public:
  // `params`/`names`: the trainable parameters in registration order, on
  // `device` (at ZeRO stage 3 they may still be on the host: the strategy moves
  // them one layer at a time). `layers`: which of them each layer of a
  // LayerStack model uses; stage 3 needs it. `initial_value`: at stage 3, the
  // whole value of parameter p of a model born sharded (zero::ZeroOptions).
  // Collective over `dp`. Throws
  // stratum::Error / ConfigError on bad input before any collective,
  // identically on every rank.
  EngineCore(const Config& config, std::vector<at::Tensor> params, std::vector<std::string> names,
             at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp, c10::Device device,
             std::optional<zero::LayerParams> layers = std::nullopt,
             std::optional<ModelParallelPlace> model_parallel = std::nullopt,
             std::function<at::Tensor(int)> initial_value = nullptr);
  ~EngineCore();

  // loss.backward() with the loss scaled for fp16 and divided by the accumulation steps.
  void backward(const at::Tensor& loss);
  // Counts the micro-step; at an accumulation boundary reduces, checks, clips
  // and updates. Returns true when the optimizer ran (false between boundaries
  // and on a skipped fp16 overflow step).
  bool step();
  // Pipeline stages run a step's micro-batches themselves (pipeline/executor.h):
  // one backward pass per micro-batch and chunk, from the loss (`grad`
  // undefined: scaled as backward() scales it) or from `output` with the next
  // stage's gradient (already scaled); `boundary`: the step's last pass.
  void backward_pass(const at::Tensor& output, const at::Tensor& grad, bool boundary);
  // ZB-H1's W: `run` computes weight gradients a backward_pass deferred
  // (timed as backward with wall_clock_breakdown).
  void backward_weight_pass(const std::function<void()>& run);
  // Split backwards (ZB-H1): every pass ran with `boundary` false and the
  // deferred weight gradients are in place; the window's reductions start.
  void close_backward_window();
  // After the step's last backward pass: the step's micro-batches counted and
  // every reduction waited for, so the segments' gradients are final
  // (averaged over data parallel) and may be adjusted (tied weights).
  void finish_gradients();
  // The optimizer step after finish_gradients() (which it calls if not yet).
  // Returns false on a skipped fp16 overflow step.
  bool pipeline_step();
  // The model's parameters are final on the current stream. Only needed with
  // zero_optimization.overlap_param_gather, where step() leaves the all-gathers
  // to the next forward, before reading parameters outside of it.
  void sync_params() { strategy_->wait_params(); }

  bool is_gradient_accumulation_boundary() const;
  int64_t global_steps() const { return global_steps_; }   // optimizer steps taken or skipped
  // The counter itself, for what reads the step later (the layer runner's reports).
  const int64_t& global_steps_ref() const { return global_steps_; }
  // comms_logger: prints the communication summary (DeepSpeed's layout) on
  // data-parallel rank 0 and starts a new one; nothing when the logger is off.
  // Also printed every steps_per_print steps with comms_logger.verbose, and when
  // the engine goes if anything was recorded since.
  void log_comms_summary();
  int64_t micro_steps() const { return micro_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  bool last_step_skipped() const { return last_skipped_; }
  double lr() const;
  double loss_scale() const;
  // Unscaled, before clipping; read from the device when asked (the step itself does not wait for it).
  double last_grad_norm() const;
  const config::BatchSizes& batch() const { return batch_; }
  at::ScalarType model_dtype() const { return model_dtype_; }
  // Where the model's parameters and activations live.
  c10::Device device() const { return device_; }
  const std::shared_ptr<distributed::Communicator>& dp() const { return dp_; }
  // The ranks whose losses make the step's mean: dp(), or with expert
  // parallelism every data-parallel rank (ModelParallelPlace::data_parallel).
  const std::shared_ptr<distributed::Communicator>& data_parallel() const {
    return mp_ && mp_->data_parallel ? mp_->data_parallel : dp_;
  }
  const std::optional<ModelParallelPlace>& model_parallel() const { return mp_; }
  // The model's tensor-parallel group's size (1: none).
  int64_t tensor_parallel_size() const { return mp_ && mp_->tensor_parallel ? mp_->tensor_parallel->size() : 1; }
  const zero::ZeroStrategy& strategy() const { return *strategy_; }
  zero::ZeroStrategy& strategy() { return *strategy_; }
  // Bytes of this rank's persistent model states (parameters, gradients, fp32
  // master weights, optimizer states), counted from the buffers that hold them.
  ModelStateBytes model_state_bytes() const;
  // What checkpoints save and restore (mutable: loading writes it).
  TrainingState training_state();

  // Engine<Model>::forward's brackets around the model's forward (see
  // ForwardBracket): wall_clock_breakdown's forward timer and, in the step
  // the flops_profiler section names, the profiler. Forwards under no-grad
  // (evaluation) are neither timed nor profiled: they are no training micro-step.
  void begin_forward();
  void end_forward();
  void cancel_forward() noexcept;  // the forward threw: nothing of it is kept
  // ZeRO-3 with a frozen base partitioned over data parallelism
  // (zero/frozen_units.h): the layer runner gathers it, and the core
  // releases what a backward pass left gathered. Null otherwise.
  void attach_frozen_units(std::unique_ptr<zero::FrozenUnits> units);
  void attach_step_observer(std::shared_ptr<StepObserver> observer) { observer_ = std::move(observer); }
  const std::shared_ptr<StepObserver>& step_observer() const { return observer_; }
  zero::FrozenUnits* frozen_units() { return frozen_.get(); }
  const zero::FrozenUnits* frozen_units() const { return frozen_.get(); }
  // With the flops_profiler section enabled, initialize() hands over the
  // model's outline (taken before ZeRO-3 partitions the parameters); rank 0
  // profiles, as DeepSpeed's global rank 0 does.
  void attach_flops_profiler(ModelOutline outline);
  // The profiler (rank 0, flops_profiler enabled; null otherwise). After the
  // profiled step it keeps that step's counts.
  const FlopsProfiler* flops_profiler() const { return profiler_.get(); }
  // Where this rank's reports go: wall_clock_breakdown's lines every
  // steps_per_print steps, the flops profile and the communication summary
  // (rank 0 only; lines without their final newline). Default: stdout (and
  // always stdout for the summary printed when the engine goes).
  void set_report_sink(std::function<void(const std::string&)> sink) { sink_ = std::move(sink); }

 private:
  // The step in progress is timed: wall_clock_breakdown, or the profiled step.
  bool timing() const;
  // The step in progress is the profiled one (on the profiling rank).
  bool profiling() const;
  // At the accumulation boundary, after the update: the profile, the timer lines.
  void finish_step_diagnostics(bool profiled);
  void report(const std::string& text);
  // step() from the wait for the gradients on, at the boundary.
  bool optimizer_step();
  bool check_overflow();
  // The ranks of each ModelParallelPlace::partial group hold as many of
  // its elements (the sums line up): collective, at construction.
  void check_partial_gradients();
  // ModelParallelPlace::partial, after the data-parallel reduction.
  // What a backward multiplies the loss by: the loss scale over the
  // accumulation steps (and the expert-parallel size).
  double loss_factor() const;
  void reduce_partial_gradients();
  bool pipeline_stage() const { return mp_ && mp_->stages; }
  // zero_optimization.ignore_unused_parameters false: every trainable parameter got a gradient this window.
  void check_every_parameter_reached() const;
  // 0-dim fp32 on the gradients' device: no host sync.
  at::Tensor global_grad_norm(double loss_scale);
  // grad_scale: 0-dim fp32 on the gradients' device (loss scale / clip coefficient).
  void apply_optimizer(const at::Tensor& grad_scale);
  // Lamb's first pass over every segment (moments, partial norms of each
  // parameter), the norms summed over DP when partitioned: the trust ratio of
  // every parameter, for update_segment (on the masters' device; host: fp64).
  at::Tensor lamb_trust_ratios(const at::Tensor& grad_scale, double host_grad_scale);
  // Segment i's step (Adam; Lamb's second pass with `trust_ratios`), on the
  // device, or the host with offload.
  void update_segment(size_t i, const at::Tensor& grad_scale, double host_grad_scale, const at::Tensor& trust_ratios);

  Config config_;
  std::optional<ModelParallelPlace> mp_;
  bool gradients_finished_ = false;
  config::BatchSizes batch_;
  at::ScalarType model_dtype_;
  std::shared_ptr<distributed::Communicator> dp_;
  std::unique_ptr<zero::ZeroStrategy> strategy_;
  std::unique_ptr<zero::FrozenUnits> frozen_;
  std::shared_ptr<StepObserver> observer_;
  std::vector<optim::AdamState> adam_;
  std::unique_ptr<optim::HostAdam> host_adam_;  // offload_optimizer: the step runs on the host
  std::vector<optim::LambRuns> lamb_runs_;      // Lamb: per segment, the parameter runs it holds
  std::unique_ptr<optim::LrScheduler> scheduler_;
  std::unique_ptr<optim::LossScaler> scaler_;
  int64_t micro_steps_ = 0, global_steps_ = 0, skipped_steps_ = 0;
  bool last_skipped_ = false;
  at::Tensor last_grad_norm_;
  bool in_backward_window_ = false;
  c10::Device device_;
  std::unique_ptr<PhaseTimers> timers_;      // wall_clock_breakdown or flops_profiler
  std::unique_ptr<FlopsProfiler> profiler_;  // flops_profiler, on rank 0
  std::function<void(const std::string&)> sink_;
  bool forward_timed_ = false, forward_profiled_ = false;
};

// Opens EngineCore::begin_forward for a scope; close() after the forward
// returned, else the destructor cancels (a forward that threw).
class ForwardBracket {
 public:
  explicit ForwardBracket(EngineCore& core) : core_(core) { core_.begin_forward(); }
  ForwardBracket(const ForwardBracket&) = delete;
  ForwardBracket& operator=(const ForwardBracket&) = delete;
  void close() {
    closed_ = true;
    core_.end_forward();
  }
  ~ForwardBracket() {
    if (!closed_) core_.cancel_forward();
  }

 private:
  EngineCore& core_;
  bool closed_ = false;
};

}  // namespace stratum
