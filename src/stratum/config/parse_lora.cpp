// The "lora" section: peft's LoraConfig keys (an adapter_config.json's LoRA
// keys pasted in are read as peft reads them), plus Stratum's base_dtype.
#include "stratum/config/parse_sections.h"
#include "stratum/core/error.h"

namespace stratum::config {

const char* lora_base_dtype_name(LoraBaseDType d) {
  switch (d) {
    case LoraBaseDType::model: return "model";
    case LoraBaseDType::bf16: return "bf16";
    case LoraBaseDType::nf4: return "nf4";
  }
  return "?";
}

const std::vector<std::string>& lora_target_names(const std::string& arch) {
  static const std::vector<std::string> gpt2 = {"c_attn", "c_proj", "c_fc"};
  static const std::vector<std::string> llama = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  // A mixture of experts: attention and each expert's three projections (the
  // router, "gate", trains whole through modules_to_save if at all).
  static const std::vector<std::string> mixtral = {"q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3"};
  static const std::vector<std::string> none;
  return arch == "gpt2"                          ? gpt2
         : arch == "llama" || arch == "qwen3_moe" ? llama
         : arch == "mixtral"                      ? mixtral
                                                  : none;
}

namespace {

// Beyond any adapter's rank (peft's largest published ones are 256-1024).
constexpr int64_t kMaxRank = 1 << 16;

// A list of names, or (as peft allows) one string; peft reads a string other
// than "all-linear" as a regular expression, which Stratum does not.
std::vector<std::string> module_list(KeyReader& lora, const std::string& key) {
  const Json* v = lora.raw(key);
  if (!v || v->is_null()) return {};
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (key == "target_modules" && s != "all-linear")
      lora.diagnostics().error(lora.path_of(key), "\"" + s + "\" is a regular expression to peft; Stratum takes "
                                                  "\"all-linear\" or a list of module names "
                                                  "([\"q_proj\", \"v_proj\", ...])");
    return {s};
  }
  if (!v->is_array()) {
    lora.diagnostics().error(lora.path_of(key), "expected a list of module names, got " + show(*v));
    return {};
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string() || (*v)[i].get<std::string>().empty())
      lora.diagnostics().error(lora.path_of(key) + "[" + std::to_string(i) + "]",
                               "expected a module name, got " + show((*v)[i]));
    else
      out.push_back((*v)[i].get<std::string>());
  }
  if (key == "target_modules" && v->empty())
    lora.diagnostics().error(lora.path_of(key), "is empty: name the linear layers to adapt ([\"q_proj\", "
                                                "\"v_proj\"], or \"all-linear\"), or leave the key out for the "
                                                "model's default");
  return out;
}

}  // namespace

void parse_lora(KeyReader& root, Config& config) {
  KeyReader lora = root.child("lora");
  if (!lora.present()) return;
  LoraConfig& l = config.lora;
  Diagnostics& diag = lora.diagnostics();
  l.enabled = lora.get_bool("enabled", true);
  l.r = lora.get_int("r", l.r, 1, kMaxRank);
  l.lora_alpha = lora.get_double("lora_alpha", l.lora_alpha, 0.0, 1e9);
  if (l.lora_alpha <= 0.0) diag.error(lora.path_of("lora_alpha"), "must be > 0 (the adapter's scale is alpha / r)");
  l.lora_dropout = lora.get_double("lora_dropout", l.lora_dropout, 0.0, 1.0);
  if (l.lora_dropout >= 1.0) diag.error(lora.path_of("lora_dropout"), "must be < 1 (a probability of dropping)");
  l.target_modules = module_list(lora, "target_modules");
  // Known before the model is: a target must end in a linear layer's name
  // (stratum-config check refuses what training would).
  for (size_t i = 0; i < l.target_modules.size(); ++i) {
    const std::string& t = l.target_modules[i];
    if (t == "all-linear") continue;
    const std::string tail = t.substr(t.rfind('.') == std::string::npos ? 0 : t.rfind('.') + 1);
    bool known = false;
    std::vector<std::string> all;
    for (const char* arch : {"llama", "gpt2", "mixtral"})
      for (const auto& n : lora_target_names(arch)) {
        known = known || n == tail;
        all.push_back(n);
      }
    if (!known)
      diag.error(lora.path_of("target_modules") + "[" + std::to_string(i) + "]",
                 "'" + t + "' is not a linear layer LoRA adapts (LLaMA and Qwen3-MoE: q_proj, k_proj, v_proj, o_proj, "
                 "gate_proj, up_proj, down_proj; Mixtral: q_proj, k_proj, v_proj, o_proj, w1, w2, w3; GPT-2: c_attn, "
                 "c_proj, c_fc); the LM head, embeddings and a router train whole through modules_to_save" +
                     did_you_mean(tail, all));
  }
  l.modules_to_save = module_list(lora, "modules_to_save");
  l.use_rslora = lora.get_bool("use_rslora", false);
  const std::string base = lora.get_enum("base_dtype", "model", {"model", "bf16", "nf4"});
  l.base_dtype = base == "nf4" ? LoraBaseDType::nf4 : base == "bf16" ? LoraBaseDType::bf16 : LoraBaseDType::model;
  // peft keys whose other values Stratum does not implement.
  lora.get_enum("peft_type", "LORA", {"LORA"});
  lora.get_enum("task_type", "CAUSAL_LM", {"CAUSAL_LM"});
  lora.unsupported("bias", "none", "biases stay frozen; list a module in modules_to_save to train it whole", "peft");
  lora.unsupported("use_dora", false, "", "peft");
  lora.unsupported("init_lora_weights", true, "adapters start as peft's default: A kaiming-uniform, B zero", "peft");
  lora.unsupported("rank_pattern", Json::object(), "one r for every adapted layer", "peft");
  lora.unsupported("alpha_pattern", Json::object(), "one lora_alpha for every adapted layer", "peft");
  lora.unsupported("layers_to_transform", Json(nullptr), "every layer's target modules are adapted", "peft");
  lora.unsupported("layers_pattern", Json(nullptr), "", "peft");
  lora.unsupported("exclude_modules", Json(nullptr), "", "peft");
  lora.unsupported("loftq_config", Json::object(), "", "peft");
  lora.unsupported("layer_replication", Json(nullptr), "", "peft");
  lora.unsupported("use_qalora", false, "", "peft");
  lora.noted("fan_in_fan_out", Json(nullptr),
             "the base's layout is known per model (GPT-2's Conv1D weights are transposed on load); the adapters "
             "are stored as peft stores them either way");
  lora.noted("base_model_name_or_path", Json(nullptr), "the base model comes from --model / --init-from");
  lora.noted("revision", Json(nullptr), "the base model comes from --model / --init-from");
  lora.noted("inference_mode", Json(nullptr), "adapters train when the engine trains and not when it evaluates");
  lora.noted("auto_mapping", Json(nullptr), "not used");
  lora.finish();
  if (l.base_dtype == LoraBaseDType::bf16 && config.precision() != DType::bf16)
    diag.error(lora.path_of("base_dtype"), "is \"bf16\" but training runs in " +
                                               std::string(config.precision() == DType::fp16 ? "fp16" : "fp32") +
                                               "; enable the bf16 section, or leave base_dtype out (the base then "
                                               "stays in the training precision)");
}

}  // namespace stratum::config
