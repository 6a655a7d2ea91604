#pragma once
// Hugging Face `config.json` for a built-in model, so that an exported
// checkpoint (model.safetensors with to_hf_state_dict's names) loads with
// transformers' AutoModelForCausalLM: GPT2LMHeadModel or LlamaForCausalLM.
#include <cstddef>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratum/models/model_config.h"

namespace stratum::models {

// `torch_dtype`: the dtype of the exported tensors ("float32", "bfloat16", "float16").
nlohmann::json hf_config_json(const ModelConfig& config, const std::string& torch_dtype = "float32");

// config.json is read from a stranger's directory: at most this many bytes.
inline constexpr size_t kMaxHfConfigBytes = size_t{16} << 20;

// The reverse, for importing a Hugging Face checkpoint: model_type "gpt2" or
// "llama". What transformers would refuse, or would build differently from
// Stratum's model, throws stratum::Error naming the key: a value of the wrong
// JSON type (12.5, true or "4096" for an integer; null where transformers has
// no default), a dimension beyond validate()'s limits, biases, other
// activations, RoPE scaling other than a complete "llama3", rope_parameters and
// rope_scaling (or their rope_theta) disagreeing, sliding windows, dropouts
// outside [0, 1) or GPT-2's embd_pdrop differing from resid_pdrop. Keys
// transformers' defaults cover take those defaults (GPT-2's dropouts 0.1).
ModelConfig model_config_from_hf(const nlohmann::json& hf_config, const std::string& name = "hf");

// A Hugging Face model directory's config.json as a ModelConfig named after
// the directory; errors name the file.
ModelConfig read_hf_model_config(const std::string& dir);

}  // namespace stratum::models
