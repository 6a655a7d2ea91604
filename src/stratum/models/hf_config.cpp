#include "stratum/models/hf_config.h"

#include <nlohmann/json.hpp>

#include "stratum/config/json_source.h"
#include "stratum/core/error.h"

namespace stratum::models {

using Json = nlohmann::json;

namespace {

// Llama 3's special tokens, written only for its vocabulary.
void llama3_special_tokens(Json& j, int64_t vocab) {
  if (vocab != 128256) return;
  j["bos_token_id"] = 128000;
  j["eos_token_id"] = 128001;
}

}  // namespace

Json hf_config_json(const ModelConfig& c, const std::string& torch_dtype) {
  validate(c);
  Json j;
  if (c.arch == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_positions"] = c.max_seq_len;
    j["n_ctx"] = c.max_seq_len;
    j["n_embd"] = c.hidden;
    j["n_layer"] = c.layers;
    j["n_head"] = c.heads;
    j["n_inner"] = c.ffn_hidden;
    j["activation_function"] = "gelu_new";
    j["resid_pdrop"] = c.dropout;
    j["embd_pdrop"] = c.dropout;
    j["attn_pdrop"] = c.attention_dropout_p();
    j["layer_norm_epsilon"] = c.norm_eps;
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
    j["bos_token_id"] = c.vocab_size - 1;  // GPT-2's <|endoftext|> is the last id (50256)
    j["eos_token_id"] = c.vocab_size - 1;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_seq_len;
    j["hidden_size"] = c.hidden;
    j["intermediate_size"] = c.ffn_hidden;
    j["num_hidden_layers"] = c.layers;
    j["num_attention_heads"] = c.heads;
    j["num_key_value_heads"] = c.kv_heads;
    j["head_dim"] = c.head_dim();
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = c.norm_eps;
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = nullptr;
    if (c.rope_scaling_factor > 0)
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling_factor},
                           {"low_freq_factor", c.rope_low_freq_factor},
                           {"high_freq_factor", c.rope_high_freq_factor},
                           {"original_max_position_embeddings", c.rope_original_max_seq_len}};
    j["attention_bias"] = false;
    j["attention_dropout"] = c.attention_dropout_p();
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    llama3_special_tokens(j, c.vocab_size);
  }
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["initializer_range"] = c.init_std;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  return j;
}

namespace {

int64_t get_int(const Json& j, const std::string& key) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw Error("Hugging Face config: '" + key + "' must be an integer");
  return j[key].get<int64_t>();
}

template <class T>
T get_or(const Json& j, const std::string& key, T def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  try {
    return j[key].get<T>();
  } catch (const Json::exception&) {
    throw Error("Hugging Face config: '" + key + "' has the wrong type (" + j[key].dump() + ")");
  }
}

void require(bool ok, const std::string& key, const std::string& what) {
  if (!ok) throw Error("Hugging Face config: '" + key + "' " + what + "; Stratum's built-in models cannot represent it");
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds rope_theta).
void read_rope_scaling(const Json& j, ModelConfig& c) {
  const char* key = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? "rope_parameters" : "rope_scaling";
  if (!j.contains(key) || j[key].is_null()) return;
  const Json& r = j[key];
  if (!r.is_object()) throw Error(std::string("Hugging Face config: '") + key + "' is not an object");
  if (r.contains("rope_theta")) c.rope_theta = get_or<double>(r, "rope_theta", c.rope_theta);
  const std::string type = get_or<std::string>(r, "rope_type", get_or<std::string>(r, "type", "default"));
  if (type == "default") return;
  require(type == "llama3", std::string(key) + ".rope_type", "is '" + type + "' (only 'llama3' scaling is supported)");
  c.rope_scaling_factor = get_or<double>(r, "factor", 0.0);
  c.rope_low_freq_factor = get_or<double>(r, "low_freq_factor", 1.0);
  c.rope_high_freq_factor = get_or<double>(r, "high_freq_factor", 4.0);
  c.rope_original_max_seq_len = get_or<int64_t>(r, "original_max_position_embeddings", 8192);
}

}  // namespace

ModelConfig model_config_from_hf(const Json& j, const std::string& name) {
  if (!j.is_object()) throw Error("Hugging Face config: not a JSON object");
  const std::string type = get_or<std::string>(j, "model_type", "");
  ModelConfig c;
  c.name = name;
  if (type == "gpt2") {
    c.arch = "gpt2";
    c.vocab_size = get_int(j, "vocab_size");
    c.max_seq_len = get_int(j, "n_positions");
    c.hidden = get_int(j, "n_embd");
    c.layers = get_int(j, "n_layer");
    c.heads = get_int(j, "n_head");
    c.kv_heads = c.heads;
    c.ffn_hidden = get_or<int64_t>(j, "n_inner", 4 * c.hidden);
    const std::string act = get_or<std::string>(j, "activation_function", "gelu_new");
    require(act == "gelu_new" || act == "gelu_pytorch_tanh", "activation_function", "is '" + act + "'");
    require(!get_or<bool>(j, "scale_attn_by_inverse_layer_idx", false), "scale_attn_by_inverse_layer_idx", "is true");
    require(get_or<bool>(j, "scale_attn_weights", true), "scale_attn_weights", "is false");
    c.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5);
    c.dropout = get_or<double>(j, "resid_pdrop", 0.0);
    if (const double attn = get_or<double>(j, "attn_pdrop", c.dropout); attn != c.dropout) c.attention_dropout = attn;
    c.rope_theta = 0;
  } else if (type == "llama") {
    c.arch = "llama";
    c.vocab_size = get_int(j, "vocab_size");
    c.max_seq_len = get_int(j, "max_position_embeddings");
    c.hidden = get_int(j, "hidden_size");
    c.layers = get_int(j, "num_hidden_layers");
    c.heads = get_int(j, "num_attention_heads");
    c.kv_heads = get_or<int64_t>(j, "num_key_value_heads", c.heads);
    c.ffn_hidden = get_int(j, "intermediate_size");
    if (j.contains("head_dim") && !j["head_dim"].is_null())
      require(get_int(j, "head_dim") * c.heads == c.hidden, "head_dim", "is not hidden_size / num_attention_heads");
    require(get_or<std::string>(j, "hidden_act", "silu") == "silu", "hidden_act", "is not 'silu'");
    require(!get_or<bool>(j, "attention_bias", false), "attention_bias", "is true");
    require(!get_or<bool>(j, "mlp_bias", false), "mlp_bias", "is true");
    c.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6);
    c.rope_theta = get_or<double>(j, "rope_theta", 10000.0);
    read_rope_scaling(j, c);
    c.dropout = get_or<double>(j, "attention_dropout", 0.0);
  } else {
    throw Error("Hugging Face config: model_type '" + type + "' is not supported (gpt2, llama)");
  }
  c.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", type == "gpt2");  // LlamaConfig defaults to untied
  c.init_std = get_or<double>(j, "initializer_range", 0.02);
  validate(c);
  return c;
}

ModelConfig read_hf_model_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const Json j = config::read_json_file(path);
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  if (const size_t slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  try {
    return model_config_from_hf(j, name);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace stratum::models
