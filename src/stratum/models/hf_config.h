#pragma once
// Hugging Face `config.json` for a built-in model, so that an exported
// checkpoint (model.safetensors with to_hf_state_dict's names) loads with
// transformers' AutoModelForCausalLM: GPT2LMHeadModel or LlamaForCausalLM.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratum/models/model_config.h"

namespace stratum::models {

// `torch_dtype`: the dtype of the exported tensors ("float32", "bfloat16", "float16").
nlohmann::json hf_config_json(const ModelConfig& config, const std::string& torch_dtype = "float32");

// The reverse, for importing a Hugging Face checkpoint: model_type "gpt2" or
// "llama"; throws stratum::Error naming the key for anything Stratum cannot
// represent (biases in LLaMA attention, rope scaling, other activations).
ModelConfig model_config_from_hf(const nlohmann::json& hf_config, const std::string& name = "hf");

// A Hugging Face model directory's config.json as a ModelConfig named after
// the directory; errors name the file.
ModelConfig read_hf_model_config(const std::string& dir);

}  // namespace stratum::models
