#pragma once
// LoRA adapters in the layout of Hugging Face peft's save_pretrained, read and
// written, so an adapter trained by either loads in the other:
//
//   DIR/adapter_config.json        peft's LoraConfig, every field, keys sorted
//   DIR/adapter_model.safetensors  "base_model.model." + the model's module path:
//       base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight  [r, in]
//       base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight  [out, r]
//       base_model.model.lm_head.weight        (modules_to_save: the module's own names)
//     peft drops the adapter's name ("default") from both kinds of key on saving,
//     and "modules_to_save.default." from the latter; metadata {"format": "pt"}.
//
// Measured with peft 0.21.2 (tests/data/hf/make_peft_fixtures.py). Stratum's
// parameter names are the keys without "base_model.model.". The A and B of a
// GPT-2 Conv1D layer are [r, in] and [out, r] too: fan_in_fan_out only says how
// the base's weight is stored.
//
// Read: every key of adapter_config.json is checked; those that change the
// adapted model's output to values Stratum does not implement are refused
// (peft_type other than "LORA", task_type other than "CAUSAL_LM", use_dora,
// rank_pattern / alpha_pattern, layers_to_transform, exclude_modules,
// layer_replication, bias other than "none", lora_bias, use_qalora,
// target_parameters, trainable_token_indices, alora_invocation_tokens, the
// LoRA variants arrow_config / kasa_config / monteclora_config / use_bdlora,
// megatron_config, an init_lora_weights that rewrote the base: pissa, olora,
// corda, loftq, lora_ga, or mica's variant). Accepted as they change nothing
// in the math: inference_mode, auto_mapping, revision, peft_version,
// base_model_name_or_path, layers_pattern (used only with
// layers_to_transform), megatron_core, qalora_group_size (only with
// use_qalora), ensure_weight_tying, the init-only loftq_config / eva_config /
// corda_config / lora_ga_config, velora_config (a backward that stores less),
// and init_lora_weights true / false / "gaussian" / "eva" / "orthogonal"
// (how A and B started). A key peft may add later is accepted when its value
// is null, false, {} or [] (peft's "off"), refused otherwise.
// adapter_model.bin (a pickle, which can run code) is refused.
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/config/sections.h"

namespace stratum {

struct PeftAdapter {
  config::LoraConfig lora;  // r, lora_alpha, lora_dropout, target_modules, use_rslora, modules_to_save
  bool fan_in_fan_out = false;  // true for GPT-2's Conv1D layers
  std::string base_model_name_or_path;  // "" writes null
  // Stratum's parameter names: "<module>.lora_A.weight" [r, in],
  // "<module>.lora_B.weight" [out, r], and modules_to_save's own parameters.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// The prefix peft puts before a module's path in adapter_model.safetensors.
inline constexpr const char* kPeftKeyPrefix = "base_model.model.";

// Reads DIR's adapter_config.json and adapter_model.safetensors (tensors on
// the CPU in their file dtype, in key order). Throws stratum::Error (a
// ConfigError listing every problem of adapter_config.json) naming the file
// and key: a file missing, a refused key or value, a tensor that is neither a
// LoRA A/B weight nor a parameter of modules_to_save, an A without its B or a
// B without its A, a shape that is not 2-D or disagrees with r, a dtype that is
// not floating point.
PeftAdapter read_peft_adapter(const std::string& dir);

// Writes DIR/adapter_model.safetensors then DIR/adapter_config.json (each to a
// temporary name renamed into place; DIR made if missing) as peft's
// save_pretrained does: every LoraConfig key peft 0.21 writes but peft_version,
// with the values of what Stratum runs (init_lora_weights true, bias "none",
// task_type "CAUSAL_LM", inference_mode true). target_modules is written as a
// list: the config's, or with "all-linear" or none given, the adapted layers'
// names found in the tensors. peft >= 0.13 drops a key it does not know with a
// warning (peft PR #2038), so the newer keys' null defaults load there too. Throws stratum::Error naming a tensor that is
// neither LoRA's nor a module_to_save's, or an A/B pair that disagrees with r.
void write_peft_adapter(const std::string& dir, const PeftAdapter& adapter);

}  // namespace stratum
