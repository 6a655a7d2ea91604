#include "stratum/config/config.h"

#include <map>

#include "stratum/config/json_source.h"
#include "stratum/config/parse_sections.h"
#include "stratum/core/error.h"

namespace stratum {
namespace {

using config::Json;
using config::KeyReader;

// Top-level DeepSpeed sections Stratum does not implement: refused by name
// unless switched off.
const std::vector<std::pair<std::string, std::string>> kUnsupportedSections = {
    {"amp", "NVIDIA Apex AMP (use the fp16 or bf16 section)"},
    {"torch_autocast", "torch autocast"},
    {"sparse_attention", "sparse attention"},
    {"autotuning", "autotuning"},
    {"elasticity", "elastic training"},
    {"compression_training", "compression training"},
    {"data_efficiency", "data efficiency (curriculum learning, random-LTD)"},
    {"curriculum_learning", "curriculum learning"},
    {"eigenvalue", "eigenvalue"},
    {"progressive_layer_drop", "progressive layer drop"},
    {"quantize_training", "quantized training"},
    {"hybrid_engine", "hybrid engine"},
    {"nebula", "Nebula checkpointing"},
    {"wandb", "Weights & Biases monitor"},
    {"comet", "Comet monitor"},
    {"compile", "torch.compile"},
    {"weight_quantization", "weight quantization"},
    {"expert_parallel", "expert parallelism (MoE)"},
    {"sequence_parallel", "sequence parallelism"},
};

void parse_top_level_unsupported(KeyReader& root) {
  for (const auto& [key, feature] : kUnsupportedSections) root.unsupported_section(key, feature);
  root.unsupported("graph_harvesting", false, "CUDA graph harvesting is not supported");
  root.unsupported("gradient_allreduce_op", "mean", "gradients are averaged over data parallel");
  root.unsupported("seq_parallel_communication_data_type", "fp32", "sequence parallelism is not supported yet");
  root.unsupported("use_data_before_expert_parallelism", false, "expert parallelism (MoE) is not supported");
  root.unsupported("train_loss_scale_power", Json(nullptr));
}

// Keys accepted with a note (docs/config_policy.md): what DeepSpeed ignores or
// has deprecated, permissions, and what Stratum does anyway.
void parse_top_level_noted(KeyReader& root) {
  root.noted("zero_allow_untested_optimizer", false,
             "no permission needed: Stratum's ZeRO runs every optimizer it has (Adam, AdamW, Lamb)");
  root.noted("zero_force_ds_cpu_optimizer", true,
             "Stratum's offload always steps with its own CPU optimizer (optim/cpu_adam)");
  root.noted("dataloader_drop_last", false,
             "applies to DeepSpeed's own data loader; Stratum's engine takes the batches its caller gives, and "
             "stratum-train always draws whole micro-batches");
  root.noted("disable_allgather", false, "deprecated and not read by DeepSpeed; Stratum gathers parameters with all-gather");
  root.noted("memory_breakdown", false,
             "Stratum's progress line reports peak memory every step (stratum-train), and stratum-estimate breaks it down");
  root.noted("vocabulary_size", Json(nullptr), "not used: the model defines its vocabulary");
  root.noted("load_universal_checkpoint", false,
             "Stratum's own checkpoints load at any world size and ZeRO stage without conversion (DeepSpeed's universal "
             "checkpoints are not read)");
  // Used only by NVMe offload (ZeRO-Infinity), which the offload sections refuse.
  root.noted("aio", Json(nullptr), "used only by NVMe offload; ignored");
  root.noted("timers", Json(nullptr), "Stratum reports throughput in its progress line and with wall_clock_breakdown");
}

// DeepSpeed's "data_types" section: the dtype gradients accumulate in.
void parse_data_types(KeyReader& root, Config& c) {
  KeyReader dt = root.child("data_types");
  if (!dt.present()) return;
  const std::string accum = dt.get_enum("grad_accum_dtype", "", {"fp32", "fp16", "bf16"});
  if (accum == "fp32") c.grad_accum_fp32 = true;
  else if (!accum.empty())
    dt.diagnostics().error(dt.path_of("grad_accum_dtype"),
                           "\"" + accum + "\" is not supported by Stratum yet (only \"fp32\"; without the key, one "
                           "rank accumulates in the model's dtype and several in communication_data_type's)");
  dt.finish();
}

// DeepSpeed's "checkpoint" section: how checkpoints are tagged and written.
// "async" (Stratum's key): a save blocks training only while the states are
// copied into host memory; a background thread writes and publishes them.
void parse_checkpoint_section(KeyReader& root, Config& c) {
  KeyReader ck = root.child("checkpoint");
  if (!ck.present()) return;
  c.checkpoint.async = ck.get_bool("async", false);
  ck.get_enum("tag_validation", "Warn", {"Ignore", "Warn", "Fail"}, /*ignore_case=*/true);
  ck.noted("tag_validation", Json(nullptr),
           "Stratum always checks that every rank saves and loads the same tag and ends the job naming a rank that "
           "does not");
  ck.noted("load_universal", false,
           "Stratum's own checkpoints load at any world size and ZeRO stage without conversion");
  ck.unsupported("use_node_local_storage", false,
                 "every rank's shard must be readable from the save directory on every node");
  KeyReader pw = ck.child("parallel_write");
  pw.noted("pipeline_stage", false, "every rank writes its own shard in parallel");
  pw.finish();
  ck.finish();
}

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
  config::parse_lora(root, c);
  config::parse_moe(root, c);
  config::parse_fp8(root, c);
  parse_top_level_unsupported(root);
  parse_top_level_noted(root);
  // JSON has no comments; "_comment"-style keys are the convention for them.
  for (auto it = json.begin(); it != json.end(); ++it)
    if (!it.key().empty() && it.key()[0] == '_')
      root.noted(it.key(), Json(nullptr), "a comment (its key starts with \"_\"); ignored");
  parse_checkpoint_section(root, c);
  parse_data_types(root, c);
  report_misplaced_keys(root, json);
  root.finish();
  if (diag.errors.empty()) config::check_cross_field_rules(c, diag);
  if (!diag.errors.empty()) throw ConfigError(source, diag.all_errors(), diag.notes);
  c.notes = diag.notes;
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
                               ") x tensor_parallel size (" + std::to_string(tensor_parallel.size) + ")" +
                               (context_parallel.size > 1
                                    ? " x context_parallel.size (" + std::to_string(context_parallel.size) + ")"
                                    : std::string()) +
                               " = " + std::to_string(mp)});
  return config::resolve_batch(batch, world_size / mp, source);
}

}  // namespace stratum
