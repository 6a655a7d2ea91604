#include "stratum/config/config.h"

#include <map>

#include "stratum/config/json_source.h"
#include "stratum/config/parse_sections.h"
#include "stratum/core/error.h"

namespace stratum {
namespace {

using config::Json;
using config::KeyReader;

// Top-level DeepSpeed sections Stratum does not implement.
const std::vector<std::pair<std::string, std::string>> kUnsupportedSections = {
    {"amp", "NVIDIA Apex AMP"},
    {"torch_autocast", "torch autocast"},
    {"sparse_attention", "sparse attention"},
    {"autotuning", "autotuning"},
    {"elasticity", "elastic training"},
    {"compression_training", "compression training"},
    {"data_efficiency", "data efficiency"},
    {"curriculum_learning", "curriculum learning"},
    {"eigenvalue", "eigenvalue"},
    {"progressive_layer_drop", "progressive layer drop"},
    {"quantize_training", "quantized training"},
    {"hybrid_engine", "hybrid engine"},
    {"nebula", "Nebula checkpointing"},
    {"aio", "async I/O (NVMe)"},
    {"wandb", "Weights & Biases monitor"},
    {"comet", "Comet monitor"},
    {"compile", "torch.compile"},
    {"weight_quantization", "weight quantization"},
    {"expert_parallel", "expert parallelism (MoE)"},
    {"sequence_parallel", "sequence parallelism"},
    {"data_types", "custom data types"},
    {"timers", "timers"},
};

// Keys that people put at the top level but that belong in a section.
const std::map<std::string, std::string> kNestedKeyHome = {
    {"stage", "zero_optimization"},           {"offload_optimizer", "zero_optimization"},
    {"offload_param", "zero_optimization"},   {"reduce_bucket_size", "zero_optimization"},
    {"allgather_bucket_size", "zero_optimization"}, {"overlap_comm", "zero_optimization"},
    {"contiguous_gradients", "zero_optimization"},  {"cpu_offload", "zero_optimization"},
    {"lr", "optimizer.params"},               {"betas", "optimizer.params"},
    {"eps", "optimizer.params"},              {"weight_decay", "optimizer.params"},
    {"warmup_num_steps", "scheduler.params"}, {"total_num_steps", "scheduler.params"},
    {"loss_scale", "fp16"},                   {"initial_scale_power", "fp16"},
    {"stages", "pipeline"},                   {"partition_method", "pipeline"},
    {"autotp_size", "tensor_parallel"},       {"cpu_checkpointing", "activation_checkpointing"},
};

void parse_top_level_unsupported(KeyReader& root) {
  for (const auto& [key, feature] : kUnsupportedSections) root.unsupported_section(key, feature);
  root.unsupported("dataloader_drop_last", false);
  root.unsupported("zero_allow_untested_optimizer", false, "Stratum's ZeRO works with its own Adam/AdamW");
  root.unsupported("zero_force_ds_cpu_optimizer", true);
  root.unsupported("graph_harvesting", false);
  root.unsupported("dump_state", false);
  root.unsupported("disable_allgather", false);
  root.unsupported("memory_breakdown", false);
  root.unsupported("vocabulary_size", Json(nullptr));
  root.unsupported("gradient_allreduce_op", "mean");
  root.unsupported("seq_parallel_communication_data_type", "fp32");
  root.unsupported("use_data_before_expert_parallelism", false);
  root.unsupported("load_universal_checkpoint", false, "Stratum checkpoints always load on another world size");
  root.unsupported("checkpoint", Json::object());
  root.unsupported("train_loss_scale_power", Json(nullptr));
}

void report_misplaced_keys(KeyReader& root, const Json& json) {
  for (const auto& [key, home] : kNestedKeyHome) {
    if (!json.contains(key)) continue;
    root.raw(key);  // consumed here, so finish() does not also call it unknown
    root.diagnostics().error(key, "not a top-level key; it belongs in \"" + home + "\"");
  }
}

}  // namespace

Config Config::from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object())
    throw ConfigError(source, {"the top level must be a JSON object {...}, got " + config::show(json)});
  Config c;
  c.source = source;
  config::Diagnostics diag;
  KeyReader root(&json, "", diag);
  config::parse_training(root, c);
  config::parse_zero(root, c);
  config::parse_parallel(root, c);
  config::parse_diagnostics(root, c);
  config::parse_flops_profiler(root, c);
  parse_top_level_unsupported(root);
  report_misplaced_keys(root, json);
  root.finish();
  if (diag.errors.empty()) config::check_cross_field_rules(c, diag);
  if (!diag.errors.empty()) throw ConfigError(source, diag.all_errors());
  c.warnings = diag.warnings;
  return c;
}

Config Config::from_string(const std::string& text, const std::string& source) {
  return from_json(config::parse_json_text(text, source), source);
}

Config Config::from_file(const std::string& path) { return from_json(config::read_json_file(path), path); }

config::DType Config::precision() const {
  if (bf16.enabled) return config::DType::bf16;
  if (fp16.enabled) return config::DType::fp16;
  return config::DType::fp32;
}

config::BatchSizes Config::resolve_batch(int64_t world_size) const {
  const int64_t mp = model_parallel_size();
  if (world_size < 1 || world_size % mp != 0)
    throw ConfigError(source, {"world size " + std::to_string(world_size) +
                               " is not a multiple of pipeline.stages (" + std::to_string(pipeline.stages) +
                               ") x tensor_parallel size (" + std::to_string(tensor_parallel.size) +
                               ") = " + std::to_string(mp)});
  return config::resolve_batch(batch, world_size / mp, source);
}

}  // namespace stratum
