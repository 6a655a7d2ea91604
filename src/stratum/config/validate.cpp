// Rules that involve more than one key; each message names every key involved.
#include <string>

#include "stratum/config/parse_sections.h"

namespace stratum::config {

void check_cross_field_rules(const Config& c, Diagnostics& diag) {
  if (c.fp16.enabled && c.bf16.enabled)
    diag.error("fp16.enabled", "fp16 and bf16 are both enabled; enable one of them");

  const ZeroConfig& z = c.zero_optimization;
  if (z.offload_optimizer.device == OffloadDevice::cpu && z.stage == 0)
    diag.error("zero_optimization.offload_optimizer.device",
               "\"cpu\" needs ZeRO stage 1, 2 or 3, but zero_optimization.stage is 0");
  if (z.overlap_param_gather && (z.stage == 0 || z.stage == 3))
    diag.note("zero_optimization.overlap_param_gather",
              "has no effect at stage " + std::to_string(z.stage) +
                  " (stages 1 and 2 gather parameters after the step; stage 3 gathers per layer anyway)");

  if (c.sparse_gradients && z.stage == 3)
    diag.note("sparse_gradients", "has no effect at ZeRO stage 3 (each rank reduce-scatters the embedding's "
                                  "gradient with its layer); it applies at stages 0, 1 and 2");

  if (c.grad_accum_fp32 && c.communication_data_type && *c.communication_data_type != DType::fp32)
    diag.error("data_types.grad_accum_dtype", std::string("\"fp32\" with communication_data_type \"") +
                                                  dtype_name(*c.communication_data_type) +
                                                  "\" would narrow the gradients on the wire; use \"fp32\" for both");
  if (c.communication_data_type == DType::fp16 && c.bf16.enabled)
    diag.error("communication_data_type", "\"fp16\" with bf16 training loses range; use \"bf16\" or \"fp32\"");

  const BatchConfig& b = c.batch;
  if (!b.train_batch_size && !b.train_micro_batch_size_per_gpu)
    diag.error("train_batch_size",
               "neither train_batch_size nor train_micro_batch_size_per_gpu is given; give at least one");
  if (b.train_micro_batch_size_per_gpu && b.gradient_accumulation_steps) {
    int64_t per_rank = 0;
    if (__builtin_mul_overflow(*b.train_micro_batch_size_per_gpu, *b.gradient_accumulation_steps, &per_rank))
      diag.error("train_micro_batch_size_per_gpu",
                 std::to_string(*b.train_micro_batch_size_per_gpu) + " x gradient_accumulation_steps (" +
                     std::to_string(*b.gradient_accumulation_steps) +
                     ") is over the 64-bit limit 9223372036854775807; use realistic batch sizes");
    else if (b.train_batch_size && *b.train_batch_size % per_rank != 0)
      diag.error("train_batch_size",
                 std::to_string(*b.train_batch_size) + " is not a multiple of train_micro_batch_size_per_gpu (" +
                     std::to_string(*b.train_micro_batch_size_per_gpu) + ") x gradient_accumulation_steps (" +
                     std::to_string(*b.gradient_accumulation_steps) + ") = " + std::to_string(per_rank) +
                     ", so no data-parallel size fits");
  }

  const PipelineConfig& p = c.pipeline;
  int64_t model_parallel = 0;  // Config::model_parallel_size() multiplies them unchecked
  if (__builtin_mul_overflow(p.stages, c.tensor_parallel.size, &model_parallel))
    diag.error("pipeline.stages", std::to_string(p.stages) + " x tensor_parallel size (" +
                                      std::to_string(c.tensor_parallel.size) +
                                      ") is over the 64-bit limit 9223372036854775807");
  int64_t replica = 0;
  if (!__builtin_mul_overflow(model_parallel, c.context_parallel.size, &replica) && replica > (int64_t{1} << 40))
    diag.error("context_parallel.size", std::to_string(c.context_parallel.size) + " x pipeline stages x tensor "
                                        "parallel size is over any job's ranks");
  if (p.schedule == PipelineSchedule::interleaved && p.virtual_stages < 2)
    diag.error("pipeline.schedule", "\"interleaved\" needs pipeline.virtual_stages >= 2");
  if (p.stages == 1 && p.schedule != PipelineSchedule::one_f_one_b)
    diag.note("pipeline.schedule", "has no effect with a single pipeline stage");
  check_pipeline_rules(c, diag);
}

// What the pipeline engine cannot do, decided from the config alone, so that
// stratum-config check refuses what stratum-train would.
void check_pipeline_rules(const Config& c, Diagnostics& diag) {
  const PipelineConfig& p = c.pipeline;
  if (p.stages == 1) {
    if (p.activation_checkpoint_interval > 0)
      diag.error("pipeline.activation_checkpoint_interval",
                 std::to_string(p.activation_checkpoint_interval) + " applies to a pipeline's stages (pipeline.stages "
                 "> 1); with one stage use the activation_checkpointing section");
    return;
  }
  if (p.activation_checkpoint_interval > 0 && c.activation_checkpointing.enabled)
    diag.error("pipeline.activation_checkpoint_interval",
               std::to_string(p.activation_checkpoint_interval) + " checkpoints groups of layers, and the "
               "activation_checkpointing section checkpoints blocks one by one: choose one (they would recompute "
               "twice)");
}

}  // namespace stratum::config
