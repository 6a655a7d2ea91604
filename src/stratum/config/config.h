#pragma once
// stratum::Config: a DeepSpeed ds_config.json read into typed sections and
// validated strictly. Every problem is reported at once in one ConfigError,
// each line starting with its JSON path.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratum/config/batch.h"
#include "stratum/config/sections.h"

namespace stratum {

struct Config {
  std::string source = "<json>";  // the file it came from, for messages

  config::BatchConfig batch;
  std::optional<config::OptimizerConfig> optimizer;  // unset: the user brings one
  std::optional<config::SchedulerConfig> scheduler;  // unset: constant lr
  config::Fp16Config fp16;
  config::Bf16Config bf16;
  double gradient_clipping = 1.0;  // DeepSpeed's default; 0 turns clipping off
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  // DeepSpeed's key for sparse embedding gradients. Here: at ZeRO stages 0-2
  // over several ranks, the token embedding's gradient travels as the looked-up
  // rows (an all-gather of ids and rows) instead of a dense all-reduce.
  bool sparse_gradients = false;
  std::optional<config::DType> communication_data_type;  // unset: fp32 for 16-bit training
  // DeepSpeed's data_types.grad_accum_dtype: "fp32" accumulates gradients in
  // fp32 at every data-parallel size (unset: in the wire's dtype over several
  // ranks, fp32 by default for 16-bit training; in the model's on one rank).
  bool grad_accum_fp32 = false;
  config::ZeroConfig zero_optimization;
  config::ActivationCheckpointingConfig activation_checkpointing;
  config::PipelineConfig pipeline;
  config::TensorParallelConfig tensor_parallel;
  config::ContextParallelConfig context_parallel;
  config::TopologyConfig topology;
  config::CommsLoggerConfig comms_logger;
  config::MonitorConfig monitor;
  config::FlopsProfilerConfig flops_profiler;
  config::LoraConfig lora;
  config::MoeConfig moe;
  config::Fp8Config fp8;
  config::CheckpointConfig checkpoint;
  std::optional<int64_t> steps_per_print;
  bool wall_clock_breakdown = false;

  // DeepSpeed's dump_state: the engine logs the resolved config at start.
  bool dump_state = false;

  // What accepted keys mean here ("path: note"): keys DeepSpeed ignores or has
  // deprecated, permissions, behaviour Stratum has anyway. Not errors.
  std::vector<std::string> notes;

  // Throws ConfigError naming the file (and line:column for JSON syntax errors).
  static Config from_file(const std::string& path);
  // Parses JSON text; `source` names it in messages.
  static Config from_string(const std::string& text, const std::string& source = "<json>");
  static Config from_json(const nlohmann::json& json, const std::string& source = "<json>");

  // The dtype of parameters and activations.
  config::DType precision() const;
  // The ranks of one data replica: pipeline stages x tensor-parallel x
  // context-parallel ranks (those read the same batch, each its part of the sequence).
  int64_t model_parallel_size() const { return pipeline.stages * tensor_parallel.size * context_parallel.size; }
  // The batch triple for a world of `world_size` ranks (data parallel size =
  // world_size / model_parallel_size()). Throws ConfigError.
  config::BatchSizes resolve_batch(int64_t world_size) const;
};

// The resolved config, every key with its effective value (the batch triple
// resolved for `world_size` when given).
nlohmann::json to_json(const Config& config, std::optional<int64_t> world_size = std::nullopt);

}  // namespace stratum
