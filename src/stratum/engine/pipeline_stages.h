#pragma once
// One rank's share of a LayerStack model cut into pipeline.stages stages
// (pipeline/partition.h), one per rank of each pipeline group, and the
// schedules that run it: a training step's micro-batches through the
// config's schedule (pipeline/schedule.h) by the executor
// (pipeline/executor.h), evaluation and generation through a forward-only
// one. Each stage is data parallel over its own group with any ZeRO stage and
// its own EngineCore. The engine (engine.h) holds one when pipeline.stages > 1;
// nothing else does.
//
// A model built as a skeleton (models::construct_model on the meta device) is
// born sharded: each rank draws only its stage's parameters, with the values
// the whole model has (nn/deferred_init.h), so any layout starts from the same
// weights; at ZeRO-3 a stage's parameters are drawn one layer at a time as they
// are partitioned over the stage's data-parallel group, then gathered layer by
// layer in every micro-batch's forward and backward (prefetched). A model
// built whole keeps only its stage's parameters.
// A parameter two stages hold (GPT-2's tied embedding and head, on the first
// and the last stage) starts equal; its gradient is summed over those stages
// before the step, and the gradient norm counts it once.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/config/config.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/engine/engine_core.h"
#include "stratum/nn/context_parallel/context_parallel.h"
#include "stratum/nn/layer_stack.h"
#include "stratum/nn/weight_grad_deferral.h"
#include "stratum/pipeline/executor.h"
#include "stratum/pipeline/partition.h"

namespace stratum {

// This rank's stage in a checkpoint the stages of a pipeline write together
// (checkpoint/checkpoint.h): every stage's data-parallel ranks write their
// shards (shard index stage x dp + dp rank), the stages' first ranks send
// their part of the manifest to rank 0, which writes it whole. Fragments stay
// keyed by parameter name, so any layout (stages, data-parallel size, ZeRO
// stage) reads what any other wrote.
struct PipelinePlace {
  int stage = 0, stages = 1;
  // Every rank of the job: the save's and the load's agreement.
  std::shared_ptr<distributed::Communicator> world;
  // On each stage's (and tensor-parallel index's) data-parallel rank 0: those
  // ranks, in shard order, on the CPU (the manifest's parts travel over it).
  // Null on the other ranks.
  std::shared_ptr<distributed::Communicator> leaders;
  // Parameters another stage writes (the last stage's copy of a tied embedding).
  std::set<std::string> written_elsewhere;
  // The whole model's parameter names: what the checkpoint must match.
  std::vector<std::string> model_params;
  std::vector<int> layer_stages;  // the stage of each layer, for the manifest
};

struct MicroBatch {
  at::Tensor inputs;  // read by the first stage
  at::Tensor labels;  // read by the last stage
  // Packed rows (nn/sequence_layout.h), read by every stage: int32 segment
  // ids and int64 positions, [B, T] as the inputs. Undefined: one sequence a row.
  at::Tensor segment_ids{}, position_ids{};
  // The tokens this micro-batch's loss is the mean over (its targets other
  // than -100); -1: not given. When a step's micro-batches give it (every
  // one, on every data-parallel rank), the step trains on the mean over
  // every such token of the step, not the mean of the micro-batches' means:
  // packed rows hold different numbers of trained tokens, and every layout
  // then weighs each token alike. Not given, a step costs no collective.
  int64_t loss_tokens = -1;
  // Set by the engine under context parallelism (engine/context_shard.h):
  // the tensors above are this rank's part of the sequence.
  std::shared_ptr<const nn::cp::ContextShard> context{};
};
using NextBatch = std::function<MicroBatch()>;
// The last stage's loss of one micro-batch, from the model's output and the labels.
using StageLoss = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& labels)>;

// What the ends of the pipeline make of the model's tokens and output.
struct StageHead {
  StageLoss loss;
  // Optional: the labels of the micro-batch the last stage runs next
  // (undefined: generation's logits). A head that takes the loss inside its
  // own layer (the tiled loss, nn/tiled_lm_loss.h) then outputs the loss,
  // and `loss` passes it through: no [tokens, vocab] logits on the stage.
  std::function<void(const at::Tensor& labels)> targets;
  // Generation (optional): the stack's input from tokens [B, T] on the first
  // stage (sequence parallelism pads them), and on the last the whole logits
  // [B, length, vocab] from the stack's output (gathered over tensor parallelism).
  std::function<at::Tensor(const at::Tensor& tokens)> input;
  std::function<at::Tensor(const at::Tensor& output, int64_t length)> logits;
};

class PipelineStages : private pipeline::StageOps {
 public:
  // Collective over the grid's world; the grid (built from this config)
  // checked its shape. Throws ConfigError (the same on every rank, before any
  // collective) when a stage would hold no layer or no parameter.
  PipelineStages(const Config& config, std::shared_ptr<nn::LayerStackImpl> model, StageHead head,
                 const distributed::ProcessGrid& grid);
  ~PipelineStages() override;

  // One optimizer step over gradient_accumulation_steps micro-batches:
  // `next_batch` is called that many times on every stage (the first reads
  // the inputs, the last the labels, every stage a packed layout);
  // every micro-batch of a step has the same shape. Returns the step's mean
  // loss over its micro-batches and the data-parallel ranks, on every rank.
  double train_batch(const NextBatch& next_batch);
  // The mean loss of `micro_batches` micro-batches (read as train_batch reads
  // them) over them and the data-parallel ranks, on every rank: forwards
  // alone, in eval mode, without autograd, through a forward-only schedule.
  // Every rank of the job passes the same count.
  double eval_batch(const NextBatch& next_batch, int micro_batches);
  // Generation's step: the logits of the last position of `tokens` (int64
  // [1, n] on the CPU, the same on every rank of the pipeline) as fp32 [vocab]
  // on the CPU, on every rank. Needs the head's input and logits.
  at::Tensor next_token_logits(const at::Tensor& tokens);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  // The grid's context parallelism: each stage keeps its part of every micro-batch's sequence.
  const nn::cp::ContextParallel& context_parallel() const { return context_; }
  bool is_first_stage() const { return stage_ == 0; }
  bool is_last_stage() const { return stage_ == stages_ - 1; }
  // Layers [begin, end) of chunk c of this rank are those of virtual stage c·p + stage.
  const pipeline::Partition& partition() const { return partition_; }
  const pipeline::Schedule& schedule() const { return executor_->schedule(); }
  // This rank's time in the last step's computes, its step and its waits.
  const pipeline::StepTiming& last_timing() const { return executor_->last_timing(); }
  EngineCore& core() { return *core_; }
  const EngineCore& core() const { return *core_; }
  const std::shared_ptr<nn::LayerStackImpl>& model() const { return model_; }
  // ZB-H1: the weight-gradient GEMMs this rank deferred from B to W in the last step.
  int64_t deferred_weight_gemms() const { return deferred_gemms_; }
  // The names of the parameters this stage trains, in the core's order.
  const std::vector<std::string>& parameter_names() const { return names_; }
  // This rank's place in a checkpoint the stages write together (checkpoint/checkpoint.h).
  const PipelinePlace& place() const { return place_; }

 private:
  // What a forward through the stages is for.
  enum class Mode { train, eval, logits };
  at::Tensor forward(int micro, int chunk, const at::Tensor& input) override;
  at::Tensor backward(int micro, int chunk, const at::Tensor& output_grad, bool input_only) override;
  void backward_weight(int micro, int chunk) override;
  void reduce_tied() override;
  void optimizer_step() override;
  // "pipeline stage 2: ", ahead of what a timed-out wait of this stage waited for.
  std::string where() const;
  // Layers [begin, end), in groups of pipeline.activation_checkpoint_interval recomputed in backward.
  at::Tensor run_chunk(const at::Tensor& input, size_t begin, size_t end);
  // The slot to set for micro-batch `micro`: the model's when it packs rows, else null.
  nn::SequenceLayoutSlot* micro_layout_slot(int micro) const;
  // `m` micro-batches from `next_batch` (every stage), what this stage reads of them on the device, checked.
  void read_batches(const NextBatch& next_batch, int m, const char* what);
  // The first stage's input shape, agreed by every stage: whether it changed since the last step.
  bool input_shape_changed();
  // The last stage's mean loss over `m` micro-batches, averaged over data parallel, on every rank.
  double mean_loss(int m);
  // Runs `schedule` forward-only in `mode`, in eval mode without autograd.
  void run_forwards(const pipeline::Schedule& schedule, Mode mode);

  Config config_;
  std::shared_ptr<nn::LayerStackImpl> model_;
  StageHead head_;
  int stage_ = 0, stages_ = 1, chunks_ = 1;
  c10::Device device_;
  nn::cp::ContextParallel context_;
  pipeline::Partition partition_;
  std::vector<std::string> names_;
  std::vector<int> tied_;  // indices into the core's parameters held by the first and last stage
  PipelinePlace place_;    // this rank's place in a checkpoint
  std::unique_ptr<EngineCore> core_;
  std::shared_ptr<void> runner_guard_;
  std::shared_ptr<distributed::Communicator> dp_, pp_, control_, tied_group_;
  std::unique_ptr<pipeline::ScheduleExecutor> executor_;
  // The step (or forward-only run) in progress.
  Mode mode_ = Mode::train;
  std::vector<MicroBatch> batches_;
  std::vector<std::optional<nn::SequenceLayout>> layouts_;  // each micro-batch's packed rows, on the device
  std::vector<double> weights_;  // each micro-batch's loss weight (engine_detail::token_weights)
  std::map<std::pair<int, int>, at::Tensor> inputs_, outputs_;  // by (micro, chunk)
  std::map<std::pair<int, int>, nn::DeferredWeightGrads> deferred_;  // ZB-H1: B's weight GEMMs awaiting W
  int weight_passes_ = 0;
  int64_t deferred_gemms_ = 0;
  at::Tensor loss_sum_;
  at::Tensor logits_;  // Mode::logits: the last position's, on the last stage
  int64_t logits_length_ = 0;
  int passes_ = 0;
  std::vector<int64_t> last_input_shape_;
};

}  // namespace stratum
