#pragma once
// LoRA on a built-in model by Hugging Face module names (the config's "lora"
// section, peft's keys): adapters on the target linear layers, the rest of
// the model frozen except modules_to_save.
//
//   auto model = models::construct_model(mcfg, tp, c10::kMeta);   // a skeleton
//   models::apply_lora(*model, config.lora);                       // adapters, base frozen
//   auto engine = stratum::initialize(config, model, grid);        // trains the adapters only
//
// Adapters are drawn by name as every parameter is (models/causal_lm.h):
// A kaiming-uniform as peft's (torch's Linear default), B zero, so the
// adapted model starts equal to its base, at every layout.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stratum/config/sections.h"
#include "stratum/models/causal_lm.h"

namespace stratum::models {

// The linear layers LoRA can adapt in `arch`'s blocks, by their module names
// (the LM head is not one: vocabulary-parallel, and peft's "all-linear"
// leaves it out too; list it in modules_to_save to train it whole).
const std::vector<std::string>& lora_linear_names(const std::string& arch);
// peft's default target_modules for the architecture (GPT-2: c_attn; LLaMA: q_proj, v_proj).
std::vector<std::string> default_lora_targets(const std::string& arch);

// Adds an adapter to every linear layer `lora.target_modules` names (a layer
// is named when its module path equals an entry or ends with "." + it;
// "all-linear" names them all; none given: the architecture's default),
// freezes every other parameter (requires_grad false) except those of the
// modules modules_to_save names, and returns the adapted layers' paths.
// With base_dtype "nf4" every block's linear weight (adapted or not) is held
// in NF4 (nn::LinearImpl::nf4_base): a materialized one quantized now, a
// skeleton's when drawn or loaded. A skeleton stays one (nn/deferred_init.h); a materialized model gets its
// adapters drawn on its parameters' device. Throws stratum::Error naming the
// entry that adapts nothing, a module that is not a linear LoRA can adapt
// (listing those it can), or a modules_to_save entry that matches nothing.
std::vector<std::string> apply_lora(CausalLMImpl& model, const config::LoraConfig& lora);

// Why the adapter `adapter` (its config and tensors by Stratum's names, whole)
// cannot load into `model` as apply_lora(model, run) adapted it: the scale
// differs (r, lora_alpha, use_rslora), or its tensors are not exactly the
// model's trainable parameters with their whole shapes (under expert
// parallelism, the experts another rank holds are that rank's). Empty: it fits.
std::vector<std::string> adapter_mismatches(const CausalLMImpl& model, const config::LoraConfig& run,
                                            const config::LoraConfig& adapter,
                                            const std::vector<std::pair<std::string, at::Tensor>>& tensors);

// W + scale·B·A in fp32 for every adapted layer of `base` (a model without
// adapters, whole), from `adapters` (Stratum names): peft's merge_and_unload.
// Throws naming an adapter whose layer the model lacks or whose shapes disagree.
void merge_lora(CausalLMImpl& base, const config::LoraConfig& lora,
                const std::map<std::string, at::Tensor>& adapters);

// Whether `name` is an adapter's parameter (`<layer>.lora_A.weight` or
// `<layer>.lora_B.weight`).
bool is_lora_parameter(const std::string& name);

}  // namespace stratum::models
