#include "stratum/planning/plan_config.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/config/json_source.h"
#include "stratum/core/error.h"
#include "stratum/models/float8_layers.h"

namespace stratum::planning {
namespace {

// Sets `slot` to `value`, refusing a different value fixed before (by a flag).
template <class T>
void fix(std::optional<T>& slot, const T& value, const std::string& where, const std::string& key,
         const std::string& shown) {
  if (slot && *slot != value)
    throw Error(where + ": " + key + " is " + shown + " but the command line fixes another value; drop one");
  slot = value;
}

}  // namespace

void apply_plan_config(PlanRequest& r, const std::string& path) {
  const nlohmann::json json = config::read_json_file(path);
  const Config c = Config::from_json(json, path);
  auto given = [&](const char* pointer) { return json.contains(nlohmann::json::json_pointer(pointer)); };
  if (c.topology.order != "tp-dp-pp")
    throw Error(path + ": topology.order is \"" + c.topology.order +
                "\"; the planner models Megatron's default order tp-dp-pp only (drop the key to plan)");
  const int64_t precision_bytes = c.precision() == config::DType::fp32 ? 4 : 2;
  r.shape.param_bytes = precision_bytes;
  if (c.grad_accum_fp32) {
    r.shape.grad_bytes = 4;
    r.shape.grad_accum_fp32 = true;
  } else if (c.communication_data_type) {
    r.shape.grad_bytes = *c.communication_data_type == config::DType::fp32 ? 4 : 2;
  }
  LayoutChoices& fx = r.fixed;
  const auto& z = c.zero_optimization;
  if (given("/zero_optimization/stage"))
    fix(fx.zero_stage, static_cast<int>(z.stage), path, "zero_optimization.stage", std::to_string(z.stage));
  if (given("/zero_optimization/offload_optimizer"))
    fix(fx.offload_optimizer, z.offload_optimizer.device != config::OffloadDevice::none, path,
        "zero_optimization.offload_optimizer.device", z.offload_optimizer.device == config::OffloadDevice::none ? "none" : "cpu");
  if (given("/zero_optimization/offload_param"))
    fix(fx.offload_param, z.offload_param.device != config::OffloadDevice::none, path,
        "zero_optimization.offload_param.device", z.offload_param.device == config::OffloadDevice::none ? "none" : "cpu");
  if (c.batch.train_batch_size) {
    if (r.global_batch > 0 && r.global_batch != *c.batch.train_batch_size)
      throw Error(path + ": train_batch_size is " + std::to_string(*c.batch.train_batch_size) + " but --global-batch is " +
                  std::to_string(r.global_batch) + "; drop one");
    r.global_batch = *c.batch.train_batch_size;
  }
  if (c.batch.train_micro_batch_size_per_gpu)
    fix(fx.micro_batch, *c.batch.train_micro_batch_size_per_gpu, path, "train_micro_batch_size_per_gpu",
        std::to_string(*c.batch.train_micro_batch_size_per_gpu));
  if (c.batch.gradient_accumulation_steps)
    fix(fx.micro_batches, *c.batch.gradient_accumulation_steps, path, "gradient_accumulation_steps",
        std::to_string(*c.batch.gradient_accumulation_steps));
  if (given("/pipeline/stages"))
    fix(fx.pp, c.pipeline.stages, path, "pipeline.stages", std::to_string(c.pipeline.stages));
  if (given("/pipeline/schedule"))
    fix(fx.schedule, c.pipeline.schedule, path, "pipeline.schedule", config::pipeline_schedule_name(c.pipeline.schedule));
  if (given("/pipeline/virtual_stages"))
    fix(fx.virtual_stages, c.pipeline.virtual_stages, path, "pipeline.virtual_stages",
        std::to_string(c.pipeline.virtual_stages));
  if (given("/tensor_parallel/autotp_size") || given("/tensor_parallel/tp/tp_size")) {
    const int64_t tp = std::max<int64_t>(1, c.tensor_parallel.size);
    fix(fx.tp, tp, path, "tensor_parallel.autotp_size", std::to_string(tp));
  }
  if (given("/moe/expert_parallel_size")) {
    const int64_t ep = c.moe.expert_parallel_size;
    fix(fx.ep, ep, path, "moe.expert_parallel_size", std::to_string(ep));
  }
  // Context parallelism: what the section states (its size, its method, the
  // hybrid's Ulysses size); a section stating only the method leaves the size searched.
  if (given("/context_parallel/size")) {
    const int64_t cp = c.context_parallel.size;
    fix(fx.cp, cp, path, "context_parallel.size", std::to_string(cp));
  }
  if (given("/context_parallel/method")) {
    const ContextMethod m = parse_context_method(c.context_parallel.method);
    if (fx.cp_method && *fx.cp_method != m)
      throw Error(path + ": context_parallel.method is \"" + c.context_parallel.method +
                  "\" but the command line fixes another value; drop one");
    fx.cp_method = m;
  }
  if (given("/context_parallel/ulysses_size") || (given("/context_parallel/method") && c.context_parallel.size > 1)) {
    const int64_t u = c.context_parallel.ulysses_size;
    fix(fx.cp_ulysses, u, path, "context_parallel.ulysses_size", std::to_string(u));
  }
  if (given("/tensor_parallel/sequence_parallel"))
    fix(fx.sequence_parallel, c.tensor_parallel.sequence_parallel, path, "tensor_parallel.sequence_parallel",
        c.tensor_parallel.sequence_parallel ? "true" : "false");
  if (c.activation_checkpointing.enabled || c.pipeline.activation_checkpoint_interval > 0)
    fix(fx.checkpointing, true, path,
        c.activation_checkpointing.enabled ? "activation_checkpointing" : "pipeline.activation_checkpoint_interval", "on");
  if (c.fp8.enabled) {
    if (!r.model)
      throw Error(path + ": fp8 is enabled; its weight copies follow the projections' shapes: give --model");
    r.shape.fp8 = true;
    if (!c.fp8.exclude.empty()) {
      const models::Fp8Coverage cover = models::fp8_coverage(*r.model, c.fp8.exclude);
      r.shape.fp8_share = cover.projection_params > 0 ? static_cast<double>(cover.fp8_params) /
                                                            static_cast<double>(cover.projection_params)
                                                      : 0.0;
    }
  }
  r.shape.cpu_checkpointing = r.shape.cpu_checkpointing || c.activation_checkpointing.cpu_checkpointing;
  if (c.activation_checkpointing.cpu_checkpointing_layers)
    r.shape.host_checkpoint_blocks = c.activation_checkpointing.cpu_checkpointing_layers;
}

double parse_byte_size(const std::string& text, const std::string& what) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(' '));
  std::string lower;
  for (char ch : unit) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (lower.empty() || lower == "b") scale = 1;
  else if (lower == "kb") scale = 1e3;
  else if (lower == "mb") scale = 1e6;
  else if (lower == "gb") scale = 1e9;
  else if (lower == "tb") scale = 1e12;
  else if (lower == "pb") scale = 1e15;
  else if (lower == "kib") scale = 1024.0;
  else if (lower == "mib") scale = 1024.0 * 1024;
  else if (lower == "gib") scale = 1024.0 * 1024 * 1024;
  else if (lower == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (lower == "pib") scale = 1024.0 * 1024 * 1024 * 1024 * 1024;
  if (end == begin || scale == 0 || !std::isfinite(value) || value <= 0)
    throw Error(what + " '" + text + "' is not a positive size: write it as 80GiB, 80GB or 8.0e10 (bytes)");
  return value * scale;
}

}  // namespace stratum::planning
