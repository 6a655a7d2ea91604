#pragma once
// DeepSpeed's PipelineEngine in C++: a LayerStack model cut into
// pipeline.stages stages (pipeline/partition.h), one per rank of each
// pipeline group, each stage data parallel over its own group with ZeRO 0-2
// and its own EngineCore; the step's micro-batches run through a schedule
// (pipeline/schedule.h) by the executor (pipeline/executor.h).
//
//   auto engine = stratum::initialize_pipeline(config, model, grid);  // or ctx
//   for (...) double loss = engine->train_batch(next_batch);  // one optimizer step
//
// A model built as a skeleton (models::construct_model on the meta device) is
// born sharded: each rank draws only its stage's parameters, with the values
// the whole model has (nn/deferred_init.h), so any layout starts from the same
// weights. A model built whole keeps only its stage's parameters.
// A parameter two stages hold (GPT-2's tied embedding and head, on the first
// and the last stage) starts equal (broadcast from the first stage); its
// gradient is summed over those stages before the step, and the gradient norm
// counts it once.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/config/config.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/engine/checkpoint.h"
#include "stratum/engine/engine_core.h"
#include "stratum/nn/layer_stack.h"
#include "stratum/nn/weight_grad_deferral.h"
#include "stratum/pipeline/executor.h"
#include "stratum/pipeline/partition.h"

namespace stratum {
namespace models {
class CausalLMImpl;
}

struct MicroBatch {
  at::Tensor inputs;  // read by the first stage
  at::Tensor labels;  // read by the last stage
};
using NextBatch = std::function<MicroBatch()>;
// The last stage's loss of one micro-batch, from the model's output and the labels.
using StageLoss = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& labels)>;

class PipelineEngine : private pipeline::StageOps {
 public:
  // Collective over the grid's world; the grid (built from this config)
  // checked its shape, and the engine keeps its own references to the grid's
  // communicators. Throws ConfigError (the same on every rank, before any
  // collective) when a stage would hold no layer or the config asks for what
  // pipelines lack.
  PipelineEngine(const Config& config, std::shared_ptr<nn::LayerStackImpl> model, StageLoss loss,
                 const distributed::ProcessGrid& grid);
  // Over a grid built here (ProcessGrid::create: collective; ConfigError on
  // every rank when the stages or TP do not divide the world).
  PipelineEngine(const Config& config, std::shared_ptr<nn::LayerStackImpl> model, StageLoss loss,
                 const distributed::DistContext& ctx);
  ~PipelineEngine() override;

  // One optimizer step over gradient_accumulation_steps micro-batches:
  // `next_batch` is called that many times on the first and the last stage
  // (the first reads the inputs, the last the labels) and never on the others;
  // every micro-batch of a step has the same shape. Returns the step's mean
  // loss over its micro-batches and the data-parallel ranks, on every rank.
  double train_batch(const NextBatch& next_batch);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
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
  int64_t global_steps() const { return core_->global_steps(); }
  double lr() const { return core_->lr(); }
  double loss_scale() const { return core_->loss_scale(); }
  bool last_step_skipped() const { return core_->last_step_skipped(); }
  // ZB-H1: the weight-gradient GEMMs this rank deferred from B to W in the last step.
  int64_t deferred_weight_gemms() const { return deferred_gemms_; }
  // The names of the parameters this stage trains, in the core's order.
  const std::vector<std::string>& parameter_names() const { return names_; }

  // Collective over the job: every stage writes its shards, rank 0 the
  // manifest with the layer -> stage map; any layout (stages, data-parallel
  // size, ZeRO stage, or the data-parallel engine) loads it.
  void save_checkpoint(const std::string& save_dir, const std::string& tag, const nlohmann::json& client_state);
  // Loads what any layout saved; returns the client state (engine/checkpoint.h).
  nlohmann::json load_checkpoint(const std::string& load_dir, const std::string& tag = "");

 private:
  at::Tensor forward(int micro, int chunk, const at::Tensor& input) override;
  at::Tensor backward(int micro, int chunk, const at::Tensor& output_grad, bool input_only) override;
  void backward_weight(int micro, int chunk) override;
  void reduce_tied() override;
  void optimizer_step() override;
  // "pipeline stage 2: ", ahead of what a timed-out wait of this stage waited for.
  std::string where() const;
  // Layers [begin, end), in groups of pipeline.activation_checkpoint_interval recomputed in backward.
  at::Tensor run_chunk(const at::Tensor& input, size_t begin, size_t end);

  Config config_;
  std::shared_ptr<nn::LayerStackImpl> model_;
  StageLoss loss_;
  int stage_ = 0, stages_ = 1, chunks_ = 1;
  c10::Device device_;
  pipeline::Partition partition_;
  std::vector<std::string> names_;
  std::vector<int> tied_;  // indices into the core's parameters held by the first and last stage
  PipelinePlace place_;    // this rank's place in a checkpoint
  std::unique_ptr<EngineCore> core_;
  std::shared_ptr<void> runner_guard_;
  std::shared_ptr<distributed::Communicator> dp_, pp_, control_, tied_group_;
  std::unique_ptr<pipeline::ScheduleExecutor> executor_;
  // The step in progress.
  std::vector<MicroBatch> batches_;
  std::map<std::pair<int, int>, at::Tensor> inputs_, outputs_;  // by (micro, chunk)
  std::map<std::pair<int, int>, nn::DeferredWeightGrads> deferred_;  // ZB-H1: B's weight GEMMs awaiting W
  int weight_passes_ = 0;
  int64_t deferred_gemms_ = 0;
  at::Tensor loss_sum_;
  int passes_ = 0;
  std::vector<int64_t> last_input_shape_;
};

// A causal LM (GPT-2, LLaMA) with next-token cross-entropy on the last stage.
std::unique_ptr<PipelineEngine> initialize_pipeline(const Config& config, std::shared_ptr<models::CausalLMImpl> model,
                                                    const distributed::ProcessGrid& grid);
std::unique_ptr<PipelineEngine> initialize_pipeline(const Config& config, std::shared_ptr<models::CausalLMImpl> model,
                                                    const distributed::DistContext& ctx);

}  // namespace stratum
