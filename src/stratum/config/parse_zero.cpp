#include "stratum/config/parse_sections.h"

namespace stratum::config {
namespace {

constexpr int64_t kMax = KeyReader::kIntMax;

OffloadDevice read_device(KeyReader& r) {
  const Json* v = r.raw("device");
  if (v && v->is_string() && *v == "nvme") {
    r.diagnostics().error(r.path_of("device"), "NVMe offload (ZeRO-Infinity) is not supported by Stratum yet; "
                                               "use \"cpu\" or \"none\"");
    return OffloadDevice::none;
  }
  return r.get_enum("device", "none", {"none", "cpu"}) == "cpu" ? OffloadDevice::cpu : OffloadDevice::none;
}

// Keys that only matter for NVMe offload (the device "nvme" itself is
// refused): DeepSpeed ignores them for "cpu" and "none", and so does Stratum.
// Each with DeepSpeed's default, which needs no note (null: any value gets one).
void nvme_only_keys(KeyReader& r, const std::vector<std::pair<std::string, Json>>& keys) {
  for (const auto& [key, quiet] : keys) r.noted(key, quiet, "used only by NVMe offload; ignored");
}

void parse_offload_optimizer(KeyReader& zero, ZeroConfig& z) {
  KeyReader off = zero.child("offload_optimizer");
  if (!off.present()) return;
  z.offload_optimizer.device = read_device(off);
  z.offload_optimizer.pin_memory = off.get_bool("pin_memory", true);
  z.offload_optimizer.cpuadam_cores_perc = off.get_double("cpuadam_cores_perc", 0.8, 0.0, 1.0, true);
  nvme_only_keys(off, {{"nvme_path", Json(nullptr)}, {"buffer_count", 4}, {"pipeline_read", false},
                       {"pipeline_write", false}, {"pipeline", false}, {"fast_init", false}});
  off.unsupported("ratio", 1.0, "partial offload is not supported");
  off.unsupported("super_offload", false);
  off.finish();
}

void parse_offload_param(KeyReader& zero, ZeroConfig& z) {
  KeyReader off = zero.child("offload_param");
  if (!off.present()) return;
  z.offload_param.device = read_device(off);
  z.offload_param.pin_memory = off.get_bool("pin_memory", true);
  nvme_only_keys(off, {{"nvme_path", Json(nullptr)}, {"buffer_count", 5}, {"buffer_size", 100'000'000},
                       {"max_in_cpu", 1'000'000'000}});
  off.finish();
}

// DeepSpeed's pre-offload_* spellings: cpu_offload, cpu_offload_param, cpu_offload_use_pin_memory.
void parse_deprecated_offload(KeyReader& zero, ZeroConfig& z) {
  Diagnostics& diag = zero.diagnostics();
  if (auto v = zero.get_opt_bool("cpu_offload")) {
    if (zero.has("offload_optimizer"))
      diag.error(zero.path_of("cpu_offload"), "given together with offload_optimizer; keep offload_optimizer");
    else {
      diag.note(zero.path_of("cpu_offload"), "deprecated; use \"offload_optimizer\": {\"device\": \"cpu\"}");
      if (*v) z.offload_optimizer.device = OffloadDevice::cpu;
    }
  }
  if (auto v = zero.get_opt_bool("cpu_offload_param")) {
    if (zero.has("offload_param"))
      diag.error(zero.path_of("cpu_offload_param"), "given together with offload_param; keep offload_param");
    else {
      diag.note(zero.path_of("cpu_offload_param"), "deprecated; use \"offload_param\": {\"device\": \"cpu\"}");
      if (*v) z.offload_param.device = OffloadDevice::cpu;
    }
  }
  if (auto v = zero.get_opt_bool("cpu_offload_use_pin_memory")) {
    diag.note(zero.path_of("cpu_offload_use_pin_memory"), "deprecated; use offload_*.pin_memory");
    if (!zero.has("offload_optimizer")) z.offload_optimizer.pin_memory = *v;
    if (!zero.has("offload_param")) z.offload_param.pin_memory = *v;
  }
}

}  // namespace

void parse_zero(KeyReader& root, Config& config) {
  ZeroConfig& z = config.zero_optimization;
  // Very old configs wrote "zero_optimization": true|false for stage 1|0.
  if (root.has("zero_optimization")) {
    const Json* v = root.raw("zero_optimization");
    if (!v) return;  // "auto": already reported
    if (v->is_boolean()) {
      root.diagnostics().note("zero_optimization", "a boolean is deprecated; use {\"stage\": N}");
      z.stage = v->get<bool>() ? 1 : 0;
      return;
    }
  }
  KeyReader zero = root.child("zero_optimization");
  z.stage = zero.get_int("stage", 0, 0, 3);
  z.reduce_scatter = zero.get_bool("reduce_scatter", true);
  z.reduce_bucket_size = zero.get_int("reduce_bucket_size", z.reduce_bucket_size, 1, kMax);
  // What Stratum's flat buckets make moot (each with its note, when not DeepSpeed's default).
  zero.get_bool("contiguous_gradients", true);
  zero.noted("contiguous_gradients", true,
             "Stratum's gradients always live in contiguous flat buckets (no fragmentation to avoid)");
  zero.get_bool("allgather_partitions", true);
  zero.noted("allgather_partitions", true, "Stratum gathers updated parameters with one all-gather per bucket");
  zero.get_int("allgather_bucket_size", 500'000'000, 1, kMax);
  zero.noted("allgather_bucket_size", 500'000'000,
             "Stratum all-gathers each reduce bucket in place in the flat parameter buffer (no staging memory to "
             "bound), so its gathers are sized by reduce_bucket_size");
  zero.get_int("sub_group_size", 1'000'000'000, 0, kMax);
  zero.noted("sub_group_size", 1'000'000'000,
             "Stratum's optimizer steps each bucket's shard in place, widening 16-bit gradients 128M elements at a "
             "time and streaming offloaded ones in 16M-element chunks; no sub-groups are needed");
  z.overlap_comm = zero.get_opt_bool("overlap_comm").value_or(z.stage == 3);
  z.overlap_param_gather = zero.get_bool("overlap_param_gather", false);
  z.gradient_accumulation_fusion = zero.get_bool("gradient_accumulation_fusion", true);
  z.load_from_fp32_weights = zero.get_bool("load_from_fp32_weights", true);
  parse_offload_optimizer(zero, z);
  parse_offload_param(zero, z);
  parse_deprecated_offload(zero, z);
  // DeepSpeed reads offload_param at stage 3 only.
  if (z.offload_param.device == OffloadDevice::cpu && z.stage != 3) {
    zero.diagnostics().note(zero.path_of("offload_param"),
                            "applies at ZeRO stage 3 only (DeepSpeed ignores it below); ignored at stage " +
                                std::to_string(z.stage));
    z.offload_param = OffloadParamConfig{};
  }

  // DeepSpeed accepts the stage3_* keys also without their prefix.
  zero.alias("prefetch_bucket_size", "stage3_prefetch_bucket_size", false);
  zero.alias("param_persistence_threshold", "stage3_param_persistence_threshold", false);
  zero.alias("max_live_parameters", "stage3_max_live_parameters", false);
  zero.alias("max_reuse_distance", "stage3_max_reuse_distance", false);
  zero.alias("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", false);
  zero.alias("stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", true);
  z.stage3_prefetch_bucket_size = zero.get_int("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, 0, kMax);
  z.stage3_param_persistence_threshold =
      zero.get_int("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold, 0, kMax);
  z.stage3_max_live_parameters = zero.get_int("stage3_max_live_parameters", z.stage3_max_live_parameters, 0, kMax);
  z.stage3_max_reuse_distance = zero.get_int("stage3_max_reuse_distance", z.stage3_max_reuse_distance, 0, kMax);
  z.stage3_gather_16bit_weights_on_model_save = zero.get_bool("stage3_gather_16bit_weights_on_model_save", false);
  z.ignore_unused_parameters = zero.get_bool("ignore_unused_parameters", true);

  // Tuning knobs of DeepSpeed's own implementation, and what Stratum does instead.
  const std::string stage3_design =
      "Stratum's ZeRO-3 gathers each layer's parameters as one bucket (prefetched by stage3_prefetch_bucket_size, kept "
      "by stage3_param_persistence_threshold); ";
  zero.noted("stage3_model_persistence_threshold", Json(9223372036854775807LL),
             stage3_design + "there is no model-wide persistence budget");
  zero.noted("stage3_module_granularity_threshold", 0, stage3_design + "its granularity is always the layer");
  zero.noted("stage3_use_all_reduce_for_fetch_params", false, stage3_design + "it fetches with all-gather");
  zero.noted("stage3_allgather_sequential", false, stage3_design + "one all-gather per layer");
  zero.noted("use_multi_rank_bucket_allreduce", true,
             "Stratum reduces each bucket with one collective over the data-parallel group");
  zero.noted("elastic_checkpoint", false,
             "Stratum's checkpoints always load at another world size and ZeRO stage");
  zero.noted("legacy_stage1", false, "DeepSpeed's old stage-1 implementation; Stratum has one stage 1");
  zero.noted("round_robin_gradients", false,
             "a DeepSpeed offload copy order; Stratum streams each shard's gradients to the host in order, overlapped "
             "with the CPU optimizer");
  zero.noted("memory_efficient_linear", true,
             "Stratum's linear layers always save only their input for backward");
  zero.noted("pipeline_loading_checkpoint", false, "Stratum loads each rank's shard directly");
  zero.noted("override_module_apply", true, "Stratum's ZeRO-3 partitions models it builds layer by layer");
  zero.noted("log_trace_cache_warnings", false, "Stratum's ZeRO-3 keeps no trace cache");
  zero.noted("enable_sanity_checks", false, "DeepSpeed's stage-3 debugging checks; not in Stratum");
  zero.unsupported("zero_hpz_partition_size", 1, "hierarchical partitioning (ZeRO++) is not supported");
  zero.unsupported("zero_quantized_weights", false, "ZeRO++ quantization is not supported");
  zero.unsupported("zero_quantized_nontrainable_weights", false, "ZeRO++ quantization is not supported");
  zero.unsupported("zero_quantized_gradients", false, "ZeRO++ quantization is not supported");
  zero.unsupported("zeropp_loco_param", Json(nullptr));
  zero.unsupported("mics_shard_size", -1, "MiCS is not supported");
  zero.unsupported("mics_hierarchical_params_gather", false, "MiCS is not supported");
  zero.unsupported("save_muon_momentum_buffer_in_memory", false);
  zero.unsupported("zenflow", Json(nullptr));
  zero.unsupported("leaf_module", Json::object());
  zero.finish();
}

}  // namespace stratum::config
