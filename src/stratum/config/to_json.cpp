// The resolved config as JSON (every key with its effective value), for
// `stratum-config check`, logs and checkpoint manifests.
#include <nlohmann/json.hpp>

#include "stratum/config/config.h"

namespace stratum {
namespace config {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::fp32: return "fp32";
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

const char* optimizer_name(OptimizerType t) {
  switch (t) {
    case OptimizerType::Adam: return "Adam";
    case OptimizerType::AdamW: return "AdamW";
    case OptimizerType::Lamb: return "Lamb";
  }
  return "?";
}

const char* scheduler_name(const SchedulerConfig& s) {
  static const char* names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle"};
  return names[s.index()];
}

const char* pipeline_schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::one_f_one_b: return "1f1b";
    case PipelineSchedule::gpipe: return "gpipe";
    case PipelineSchedule::interleaved: return "interleaved";
    case PipelineSchedule::zb_h1: return "zb-h1";
  }
  return "?";
}

namespace {

using Json = nlohmann::json;

template <typename T>
Json opt(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}
const char* warmup_name(WarmupType w) { return w == WarmupType::linear ? "linear" : "log"; }
const char* device_name(OffloadDevice d) { return d == OffloadDevice::cpu ? "cpu" : "none"; }

Json scheduler_params(const SchedulerConfig& s) {
  struct Visitor {
    Json operator()(const WarmupLRParams& p) const {
      return {{"warmup_min_lr", p.warmup_min_lr}, {"warmup_max_lr", opt(p.warmup_max_lr)},
              {"warmup_num_steps", p.warmup_num_steps}, {"warmup_type", warmup_name(p.warmup_type)},
              {"last_batch_iteration", p.last_batch_iteration}};
    }
    Json operator()(const WarmupDecayLRParams& p) const {
      return {{"total_num_steps", p.total_num_steps}, {"warmup_min_lr", p.warmup_min_lr},
              {"warmup_max_lr", p.warmup_max_lr}, {"warmup_num_steps", p.warmup_num_steps},
              {"warmup_type", warmup_name(p.warmup_type)}, {"last_batch_iteration", p.last_batch_iteration}};
    }
    Json operator()(const WarmupCosineLRParams& p) const {
      return {{"total_num_steps", p.total_num_steps}, {"warmup_min_ratio", p.warmup_min_ratio},
              {"warmup_num_steps", p.warmup_num_steps}, {"cos_min_ratio", p.cos_min_ratio},
              {"warmup_type", warmup_name(p.warmup_type)}, {"last_batch_iteration", p.last_batch_iteration}};
    }
    Json operator()(const OneCycleParams& p) const {
      return {{"cycle_min_lr", p.cycle_min_lr}, {"cycle_max_lr", p.cycle_max_lr},
              {"decay_lr_rate", p.decay_lr_rate}, {"cycle_first_step_size", p.cycle_first_step_size},
              {"cycle_second_step_size", p.cycle_second_step_size.value_or(p.cycle_first_step_size)},
              {"cycle_first_stair_count", p.cycle_first_stair_count},
              {"cycle_second_stair_count", p.cycle_second_stair_count.value_or(p.cycle_first_stair_count)},
              {"decay_step_size", p.decay_step_size}, {"cycle_momentum", p.cycle_momentum},
              {"cycle_min_mom", p.cycle_min_mom}, {"cycle_max_mom", p.cycle_max_mom},
              {"decay_mom_rate", p.decay_mom_rate}, {"last_batch_iteration", p.last_batch_iteration}};
    }
  };
  return std::visit(Visitor{}, s);
}

Json writer(const MonitorWriterConfig& w) {
  return {{"enabled", w.enabled}, {"output_path", w.output_path}, {"job_name", w.job_name}};
}

}  // namespace
}  // namespace config

nlohmann::json to_json(const Config& c, std::optional<int64_t> world_size) {
  using namespace config;
  Json j;
  if (world_size) {
    BatchSizes b = c.resolve_batch(*world_size);
    j["train_batch_size"] = b.train_batch_size;
    j["train_micro_batch_size_per_gpu"] = b.micro_batch_per_gpu;
    j["gradient_accumulation_steps"] = b.gradient_accumulation_steps;
  } else {
    j["train_batch_size"] = opt(c.batch.train_batch_size);
    j["train_micro_batch_size_per_gpu"] = opt(c.batch.train_micro_batch_size_per_gpu);
    j["gradient_accumulation_steps"] = opt(c.batch.gradient_accumulation_steps);
  }
  if (c.optimizer) {
    const OptimizerConfig& o = *c.optimizer;
    Json params = {{"lr", o.lr},
                   {"betas", {o.beta1, o.beta2}},
                   {"eps", o.eps},
                   {"weight_decay", o.weight_decay},
                   {"bias_correction", o.bias_correction}};
    if (o.type == OptimizerType::Lamb) {
      params["max_coeff"] = o.max_coeff;
      params["min_coeff"] = o.min_coeff;
    } else {
      params["adam_w_mode"] = o.adam_w_mode;
    }
    j["optimizer"] = {{"type", optimizer_name(o.type)}, {"params", params}};
  } else {
    j["optimizer"] = nullptr;
  }
  j["scheduler"] = c.scheduler ? Json{{"type", scheduler_name(*c.scheduler)}, {"params", scheduler_params(*c.scheduler)}}
                               : Json(nullptr);
  const Fp16Config& f = c.fp16;
  j["fp16"] = {{"enabled", f.enabled}, {"loss_scale", f.loss_scale}, {"initial_scale_power", f.initial_scale_power},
               {"loss_scale_window", f.loss_scale_window}, {"hysteresis", f.hysteresis},
               {"consecutive_hysteresis", f.consecutive_hysteresis}, {"min_loss_scale", f.min_loss_scale}};
  j["bf16"] = {{"enabled", c.bf16.enabled}};
  j["gradient_clipping"] = c.gradient_clipping;
  j["prescale_gradients"] = c.prescale_gradients;
  j["sparse_gradients"] = c.sparse_gradients;
  j["gradient_predivide_factor"] = c.gradient_predivide_factor;
  j["communication_data_type"] =
      c.communication_data_type ? Json(dtype_name(*c.communication_data_type)) : Json(nullptr);
  if (c.grad_accum_fp32) j["data_types"] = {{"grad_accum_dtype", "fp32"}};
  const ZeroConfig& z = c.zero_optimization;
  j["zero_optimization"] = {
      {"stage", z.stage},
      {"reduce_scatter", z.reduce_scatter},
      {"reduce_bucket_size", z.reduce_bucket_size},
      {"overlap_comm", z.overlap_comm},
      {"overlap_param_gather", z.overlap_param_gather},
      {"gradient_accumulation_fusion", z.gradient_accumulation_fusion},
      {"load_from_fp32_weights", z.load_from_fp32_weights},
      {"offload_optimizer", {{"device", device_name(z.offload_optimizer.device)},
                             {"pin_memory", z.offload_optimizer.pin_memory},
                             {"cpuadam_cores_perc", z.offload_optimizer.cpuadam_cores_perc}}},
      {"offload_param", {{"device", device_name(z.offload_param.device)}, {"pin_memory", z.offload_param.pin_memory}}},
      {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
      {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
      {"stage3_max_live_parameters", z.stage3_max_live_parameters},
      {"stage3_max_reuse_distance", z.stage3_max_reuse_distance},
      {"stage3_gather_16bit_weights_on_model_save", z.stage3_gather_16bit_weights_on_model_save},
      {"ignore_unused_parameters", z.ignore_unused_parameters}};
  if (c.activation_checkpointing.enabled)  // the section's presence turns checkpointing on
    j["activation_checkpointing"] = {
        {"number_checkpoints", opt(c.activation_checkpointing.number_checkpoints)},
        {"cpu_checkpointing", c.activation_checkpointing.cpu_checkpointing},
        {"cpu_checkpointing_layers", opt(c.activation_checkpointing.cpu_checkpointing_layers)},
        {"contiguous_memory_optimization", c.activation_checkpointing.contiguous_memory_optimization},
        {"synchronize_checkpoint_boundary", c.activation_checkpointing.synchronize_checkpoint_boundary},
        {"profile", c.activation_checkpointing.profile}};
  const PipelineConfig& p = c.pipeline;
  j["pipeline"] = {{"stages", p.stages}, {"partition_method", p.partition_method},
                   {"activation_checkpoint_interval", p.activation_checkpoint_interval},
                   {"schedule", pipeline_schedule_name(p.schedule)}, {"virtual_stages", p.virtual_stages}};
  j["topology"] = {{"order", c.topology.order}};
  j["checkpoint"] = {{"async", c.checkpoint.async}};
  j["tensor_parallel"] = {{"autotp_size", c.tensor_parallel.size},
                          {"sequence_parallel", c.tensor_parallel.sequence_parallel}};
  j["context_parallel"] = {{"size", c.context_parallel.size},
                           {"method", c.context_parallel.method},
                           {"ulysses_size", c.context_parallel.ulysses_size}};
  const CommsLoggerConfig& cl = c.comms_logger;
  j["comms_logger"] = {{"enabled", cl.enabled}, {"verbose", cl.verbose}, {"prof_all", cl.prof_all},
                       {"prof_ops", cl.prof_ops}, {"debug", cl.debug}};
  j["tensorboard"] = writer(c.monitor.tensorboard);
  j["csv_monitor"] = writer(c.monitor.csv_monitor);
  const FlopsProfilerConfig& fp = c.flops_profiler;
  j["flops_profiler"] = {{"enabled", fp.enabled},           {"recompute_fwd_factor", fp.recompute_fwd_factor},
                         {"profile_step", fp.profile_step}, {"module_depth", fp.module_depth},
                         {"top_modules", fp.top_modules},   {"detailed", fp.detailed},
                         {"output_file", fp.output_file.empty() ? Json(nullptr) : Json(fp.output_file)}};
  if (c.lora.enabled) {
    const LoraConfig& l = c.lora;
    j["lora"] = {{"r", l.r},
                 {"lora_alpha", l.lora_alpha},
                 {"lora_dropout", l.lora_dropout},
                 {"target_modules", l.target_modules.empty() ? Json(nullptr) : Json(l.target_modules)},
                 {"use_rslora", l.use_rslora},
                 {"modules_to_save", l.modules_to_save.empty() ? Json(nullptr) : Json(l.modules_to_save)},
                 {"base_dtype", lora_base_dtype_name(l.base_dtype)}};
  }
  if (c.moe.present) {
    const MoeConfig& m = c.moe;
    j["moe"] = {{"num_experts", opt(m.num_experts)},
                {"top_k", opt(m.top_k)},
                {"expert_parallel_size", m.expert_parallel_size},
                {"capacity_factor", m.capacity_factor},
                {"drop_policy", m.drop_policy},
                {"load_balancing", m.load_balancing},
                {"aux_loss_coeff", m.aux_loss_coeff},
                {"z_loss_coeff", m.z_loss_coeff},
                {"expert_bias_update_rate", m.expert_bias_update_rate}};
  }
  if (c.fp8.enabled) {
    j["fp8"] = {{"enabled", true}, {"recipe", fp8_recipe_name(c.fp8.recipe)}, {"exclude", c.fp8.exclude}};
    if (c.fp8.all_gather_fp8) j["fp8"]["all_gather_fp8"] = *c.fp8.all_gather_fp8;
  }
  j["steps_per_print"] = opt(c.steps_per_print);
  j["wall_clock_breakdown"] = c.wall_clock_breakdown;
  j["dump_state"] = c.dump_state;
  return j;
}

}  // namespace stratum
