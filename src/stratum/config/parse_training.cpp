#include <algorithm>
#include <cmath>
#include <limits>

#include "stratum/config/parse_sections.h"

namespace stratum::config {
namespace {

// DeepSpeed optimizers Stratum does not implement (compared lower-case).
const std::vector<std::string> kDeepSpeedOnlyOptimizers = {
    "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Adagrad", "Lion",
    "MuAdam", "MuAdamW", "MuSGD", "Muon", "AdamWScheduleFree", "SGD"};
const std::vector<std::string> kDeepSpeedOnlySchedulers = {"LRRangeTest"};

WarmupType read_warmup_type(KeyReader& r) {
  return r.get_enum("warmup_type", "log", {"log", "linear"}) == "linear" ? WarmupType::linear : WarmupType::log;
}

// WarmupDecayLR and WarmupCosineLR: the decay must not end before the warmup does.
void check_warmup_fits(KeyReader& p, int64_t total_num_steps, int64_t warmup_num_steps) {
  if (total_num_steps > 0 && total_num_steps < warmup_num_steps)
    p.diagnostics().error(p.path_of("total_num_steps"), "is " + std::to_string(total_num_steps) +
                                                            ", less than warmup_num_steps (" +
                                                            std::to_string(warmup_num_steps) + ")");
}

void parse_optimizer(KeyReader& root, Config& config) {
  KeyReader opt = root.child("optimizer");
  if (!opt.present()) return;
  Diagnostics& diag = opt.diagnostics();
  OptimizerConfig oc;
  const Json* type = opt.raw("type");
  std::string name;
  if (!type) {
    if (opt.has("type")) return;  // "auto": already reported
    diag.error(opt.path_of("type"), "missing; expected \"Adam\", \"AdamW\" or \"Lamb\"");
  } else if (!type->is_string()) {
    diag.error(opt.path_of("type"), "expected \"Adam\", \"AdamW\" or \"Lamb\", got " + show(*type));
  } else {
    name = type->get<std::string>();
    std::string low = name;
    std::transform(low.begin(), low.end(), low.begin(), ::tolower);
    if (low == "adam") {
      oc.type = OptimizerType::Adam;
    } else if (low == "adamw") {
      oc.type = OptimizerType::AdamW;
    } else if (low == "lamb") {
      oc.type = OptimizerType::Lamb;
    } else {
      bool deepspeed_knows = std::any_of(kDeepSpeedOnlyOptimizers.begin(), kDeepSpeedOnlyOptimizers.end(),
                                         [&](const std::string& o) {
                                           std::string l = o;
                                           std::transform(l.begin(), l.end(), l.begin(), ::tolower);
                                           return l == low;
                                         });
      if (deepspeed_knows)
        diag.error(opt.path_of("type"), "DeepSpeed optimizer \"" + short_name(name) +
                                            "\" is not supported by Stratum yet (supported: Adam, AdamW, Lamb)");
      else
        diag.error(opt.path_of("type"), "unknown optimizer \"" + short_name(name) + "\"; expected Adam, AdamW or Lamb" +
                                            did_you_mean(name, {"Adam", "AdamW", "Lamb"}));
      // Its params belong to an optimizer Stratum does not have: not checked key by key.
      opt.raw("params");
      opt.raw("legacy_fusion");
      opt.finish();
      return;
    }
  }
  KeyReader params = opt.child("params");
  oc.lr = params.get_double("lr", oc.lr, 0.0);
  std::vector<double> betas = params.get_number_list("betas", {oc.beta1, oc.beta2}, 2);
  for (size_t i = 0; i < betas.size(); ++i)
    if (betas[i] < 0.0 || betas[i] >= 1.0)
      diag.error(params.path_of("betas") + "[" + std::to_string(i) + "]",
                 "expected a number in [0, 1), got " + Json(betas[i]).dump());
  oc.beta1 = betas[0];
  oc.beta2 = betas[1];
  oc.eps = params.get_double("eps", oc.eps, 0.0, KeyReader::kInf, /*min_exclusive=*/true);
  oc.weight_decay = params.get_double("weight_decay", oc.weight_decay, 0.0);
  oc.bias_correction = params.get_bool("bias_correction", oc.bias_correction);
  const bool lamb = oc.type == OptimizerType::Lamb;
  // max_grad_norm: 0 is FusedLamb's default (no clipping of its own); Adam has no such option.
  if (const Json* v = params.has("max_grad_norm") ? params.raw("max_grad_norm") : nullptr;
      v && !(lamb && v->is_number() && v->get<double>() == 0.0))
    diag.error(params.path_of("max_grad_norm"), "Stratum clips by the top-level \"gradient_clipping\"; move it there");
  params.unsupported("amsgrad", false);
  if (lamb) {
    // DeepSpeed's FusedLamb: the trust ratio is clamped to [min_coeff, max_coeff].
    oc.max_coeff = params.get_double("max_coeff", oc.max_coeff, 0.0, KeyReader::kInf, /*min_exclusive=*/true);
    oc.min_coeff = params.get_double("min_coeff", oc.min_coeff, 0.0, KeyReader::kInf, /*min_exclusive=*/true);
    if (oc.min_coeff > oc.max_coeff)
      diag.error(params.path_of("min_coeff"), "is " + Json(oc.min_coeff).dump() + ", greater than max_coeff (" +
                                                  Json(oc.max_coeff).dump() + ")");
    params.unsupported("eps_inside_sqrt", false);
    for (const char* key : {"adam_w_mode", "torch_adam", "fused", "foreach", "set_grad_none"})
      if (params.raw(key))
        diag.error(params.path_of(key), "an Adam option; Lamb (DeepSpeed's FusedLamb) has none (its weight decay is "
                                        "always decoupled, inside the update)");
  } else {
    // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false; "AdamW" is always decoupled.
    oc.adam_w_mode = params.get_bool("adam_w_mode", true);
    if (oc.type == OptimizerType::AdamW && !oc.adam_w_mode)
      diag.error(params.path_of("adam_w_mode"), "AdamW is always decoupled; use type \"Adam\" for adam_w_mode false");
    // How DeepSpeed runs the same update: Stratum's own fused Adam is one way for all of them.
    params.get_bool("torch_adam", false);
    params.noted("torch_adam", false, "Stratum's fused Adam computes torch.optim.Adam's update");
    params.noted("fused", Json(nullptr), "Stratum's Adam is always fused");
    params.noted("foreach", Json(nullptr), "Stratum's Adam is always fused");
    params.noted("set_grad_none", true, "Stratum's gradients live in ZeRO's flat buffers; nothing to set to None");
  }
  params.finish();
  opt.noted("legacy_fusion", false, "deprecated; Stratum's optimizers are always fused");
  opt.finish();
  config.optimizer = oc;
}

void parse_scheduler(KeyReader& root, Config& config) {
  KeyReader sch = root.child("scheduler");
  if (!sch.present()) return;
  Diagnostics& diag = sch.diagnostics();
  const std::vector<std::string> supported = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle"};
  const Json* type = sch.raw("type");
  std::string name;
  if (!type) {
    if (!sch.has("type")) diag.error(sch.path_of("type"), "missing; expected one of WarmupLR, WarmupDecayLR, "
                                                          "WarmupCosineLR, OneCycle");
  } else if (!type->is_string()) {
    diag.error(sch.path_of("type"), "expected a scheduler name, got " + show(*type));
  } else {
    name = type->get<std::string>();
    if (std::find(supported.begin(), supported.end(), name) == supported.end()) {
      if (std::find(kDeepSpeedOnlySchedulers.begin(), kDeepSpeedOnlySchedulers.end(), name) !=
          kDeepSpeedOnlySchedulers.end())
        diag.error(sch.path_of("type"), "DeepSpeed scheduler \"" + short_name(name) + "\" is not supported by Stratum yet");
      else
        diag.error(sch.path_of("type"), "unknown scheduler \"" + short_name(name) + "\"; expected one of WarmupLR, "
                                        "WarmupDecayLR, WarmupCosineLR, OneCycle" + did_you_mean(name, supported));
      name.clear();
    }
  }
  KeyReader p = sch.child("params");
  const int64_t kMax = KeyReader::kIntMax;
  auto require = [&](const std::string& key) {
    if (!p.has(key)) diag.error(p.path_of(key), "required by " + name + " but missing");
  };
  if (name == "WarmupLR") {
    WarmupLRParams w;
    w.warmup_min_lr = p.get_double("warmup_min_lr", w.warmup_min_lr, 0.0);
    w.warmup_max_lr = p.get_opt_double("warmup_max_lr", 0.0);
    w.warmup_num_steps = p.get_int("warmup_num_steps", w.warmup_num_steps, 1, kMax);
    w.warmup_type = read_warmup_type(p);
    w.last_batch_iteration = p.get_int("last_batch_iteration", -1, -1, kMax);
    config.scheduler = w;
  } else if (name == "WarmupDecayLR") {
    WarmupDecayLRParams w;
    require("total_num_steps");
    w.total_num_steps = p.get_int("total_num_steps", 0, 1, kMax);
    w.warmup_min_lr = p.get_double("warmup_min_lr", w.warmup_min_lr, 0.0);
    w.warmup_max_lr = p.get_double("warmup_max_lr", w.warmup_max_lr, 0.0);
    w.warmup_num_steps = p.get_int("warmup_num_steps", w.warmup_num_steps, 1, kMax);
    w.warmup_type = read_warmup_type(p);
    w.last_batch_iteration = p.get_int("last_batch_iteration", -1, -1, kMax);
    check_warmup_fits(p, w.total_num_steps, w.warmup_num_steps);
    config.scheduler = w;
  } else if (name == "WarmupCosineLR") {
    WarmupCosineLRParams w;
    require("total_num_steps");
    w.total_num_steps = p.get_int("total_num_steps", 0, 1, kMax);
    w.warmup_min_ratio = p.get_double("warmup_min_ratio", w.warmup_min_ratio, 0.0, 1.0);
    w.warmup_num_steps = p.get_int("warmup_num_steps", w.warmup_num_steps, 1, kMax);
    w.cos_min_ratio = p.get_double("cos_min_ratio", w.cos_min_ratio, 0.0, 1.0);
    w.warmup_type = read_warmup_type(p);
    w.last_batch_iteration = p.get_int("last_batch_iteration", -1, -1, kMax);
    check_warmup_fits(p, w.total_num_steps, w.warmup_num_steps);
    config.scheduler = w;
  } else if (name == "OneCycle") {
    OneCycleParams o;
    require("cycle_min_lr");
    require("cycle_max_lr");
    o.cycle_min_lr = p.get_double("cycle_min_lr", 0.0, 0.0);
    o.cycle_max_lr = p.get_double("cycle_max_lr", 0.0, 0.0);
    o.decay_lr_rate = p.get_double("decay_lr_rate", 0.0, 0.0);
    o.cycle_first_step_size = p.get_int("cycle_first_step_size", o.cycle_first_step_size, 1, kMax);
    o.cycle_second_step_size = p.get_opt_int("cycle_second_step_size", 1, kMax);
    o.cycle_first_stair_count = p.get_int("cycle_first_stair_count", 0, 0, kMax);
    o.cycle_second_stair_count = p.get_opt_int("cycle_second_stair_count", 0, kMax);
    o.decay_step_size = p.get_int("decay_step_size", 0, 0, kMax);
    o.cycle_momentum = p.get_bool("cycle_momentum", true);
    o.cycle_min_mom = p.get_double("cycle_min_mom", o.cycle_min_mom, 0.0, 1.0);
    o.cycle_max_mom = p.get_double("cycle_max_mom", o.cycle_max_mom, 0.0, 1.0);
    o.decay_mom_rate = p.get_double("decay_mom_rate", 0.0, 0.0);
    o.last_batch_iteration = p.get_int("last_batch_iteration", -1, -1, kMax);
    if (o.cycle_max_lr < o.cycle_min_lr)
      diag.error(p.path_of("cycle_max_lr"), "is less than cycle_min_lr");
    if (o.cycle_momentum && o.cycle_max_mom < o.cycle_min_mom)
      diag.error(p.path_of("cycle_max_mom"), "is less than cycle_min_mom");
    config.scheduler = o;
  } else {
    return;  // type already reported; params cannot be checked against an unknown schedule
  }
  p.finish();
  sch.finish();
}

void parse_precision(KeyReader& root, Config& config) {
  KeyReader fp16 = root.child("fp16");
  Fp16Config& f = config.fp16;
  f.enabled = fp16.get_bool("enabled", false);
  f.loss_scale = fp16.get_double("loss_scale", 0.0, 0.0);
  f.initial_scale_power = fp16.get_int("initial_scale_power", 16, 0, 127);
  f.loss_scale_window = fp16.get_int("loss_scale_window", 1000, 1);
  f.hysteresis = fp16.get_int("hysteresis", 2, 1);
  f.consecutive_hysteresis = fp16.get_bool("consecutive_hysteresis", false);
  f.min_loss_scale = fp16.get_double("min_loss_scale", 1.0, 0.0, KeyReader::kInf, /*min_exclusive=*/true);
  fp16.get_bool("auto_cast", false);
  fp16.noted("auto_cast", false,
             "the engine always casts floating-point inputs of forward() to the training dtype");
  fp16.unsupported("fp16_master_weights_and_grads", false, "master weights are always fp32");
  fp16.noted("opt_level", Json(nullptr),
             "an Apex AMP setting that DeepSpeed's fp16 mode ignores; Stratum trains in fp16 with fp32 master weights "
             "(Apex O2's scheme)");
  fp16.noted("fp16_scale_tolerance", 0.0, "deprecated and not read by DeepSpeed; ignored");
  fp16.finish();
  if (f.dynamic() && f.min_loss_scale > std::ldexp(1.0, static_cast<int>(f.initial_scale_power)))
    fp16.diagnostics().error(fp16.path_of("min_loss_scale"),
                             "is larger than the initial scale 2^" + std::to_string(f.initial_scale_power));

  root.alias("bfloat16", "bf16", /*deprecated=*/true);
  KeyReader bf16 = root.child("bf16");
  config.bf16.enabled = bf16.get_bool("enabled", false);
  // fp16's loss-scaling keys copied into the bf16 section: DeepSpeed ignores them there.
  for (const char* key : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                          "consecutive_hysteresis", "min_loss_scale", "auto_cast"})
    bf16.noted(key, Json(nullptr), "bf16 needs no loss scaling; ignored");
  bf16.unsupported("immediate_grad_update", false);
  bf16.unsupported("check_grad_overflow", false, "bf16 needs no overflow check");
  bf16.unsupported("bf16_master_weights_and_grads", false, "master weights are always fp32");
  bf16.unsupported("bf16_optimizer_states", false, "optimizer states are always fp32");
  bf16.finish();
}

}  // namespace

std::string default_optimizer_note() {
  const OptimizerConfig d;
  return "optimizer: not set; training uses AdamW at the section's defaults (lr " + show(Json(d.lr)) + ", betas [" +
         show(Json(d.beta1)) + ", " + show(Json(d.beta2)) + "], eps " + show(Json(d.eps)) + ", weight_decay " +
         show(Json(d.weight_decay)) + "); add an \"optimizer\" section to choose";
}

void parse_training(KeyReader& root, Config& config) {
  // int's range: the engine counts micro-batches in int.
  constexpr int64_t kMaxBatch = std::numeric_limits<int32_t>::max();
  config.batch.train_batch_size = root.get_opt_int("train_batch_size", 1, kMaxBatch);
  config.batch.train_micro_batch_size_per_gpu = root.get_opt_int("train_micro_batch_size_per_gpu", 1, kMaxBatch);
  config.batch.gradient_accumulation_steps = root.get_opt_int("gradient_accumulation_steps", 1, kMaxBatch);
  parse_optimizer(root, config);
  parse_scheduler(root, config);
  parse_precision(root, config);
  config.gradient_clipping = root.get_double("gradient_clipping", 1.0, 0.0);
  config.prescale_gradients = root.get_bool("prescale_gradients", false);
  config.sparse_gradients = root.get_bool("sparse_gradients", false);
  config.gradient_predivide_factor =
      root.get_double("gradient_predivide_factor", 1.0, 0.0, KeyReader::kInf, /*min_exclusive=*/true);
  // DeepSpeed's older spelling of communication_data_type "fp32".
  const std::optional<bool> fp32_allreduce = root.get_opt_bool("fp32_allreduce");
  if (root.has("communication_data_type")) {
    const Json* v = root.raw("communication_data_type");
    if (v && !v->is_null()) {  // null is DeepSpeed's default; a missing v ("auto") is reported
      std::string s = root.get_enum("communication_data_type", "fp32", {"fp32", "fp16", "bf16"});
      config.communication_data_type = s == "fp16" ? DType::fp16 : s == "bf16" ? DType::bf16 : DType::fp32;
    }
  }
  if (fp32_allreduce.value_or(false)) {
    if (config.communication_data_type && *config.communication_data_type != DType::fp32)
      root.diagnostics().error("fp32_allreduce", std::string("true contradicts communication_data_type \"") +
                                                     dtype_name(*config.communication_data_type) + "\"; keep one");
    else
      config.communication_data_type = DType::fp32;
  }
}

}  // namespace stratum::config
