#include "stratum/models/hf_config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>

#include "stratum/core/error.h"
#include "stratum/core/json_file.h"
#include "stratum/core/shorten.h"

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
    j["architectures"] = {c.arch == "mixtral"     ? "MixtralForCausalLM"
                          : c.arch == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                                                  : "LlamaForCausalLM"};
    j["model_type"] = c.arch;
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_seq_len;
    j["hidden_size"] = c.hidden;
    j["intermediate_size"] = c.arch == "mixtral" ? c.moe_ffn_hidden : c.ffn_hidden;
    if (c.arch == "mixtral") {
      j["num_local_experts"] = c.num_experts;
      j["num_experts_per_tok"] = c.top_k;
      j["router_jitter_noise"] = 0.0;
      j["sliding_window"] = nullptr;
    } else if (c.arch == "qwen3_moe") {
      j["num_experts"] = c.num_experts;
      j["num_experts_per_tok"] = c.top_k;
      j["moe_intermediate_size"] = c.moe_ffn_hidden;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = Json::array();
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
    }
    if (c.arch != "llama") j["router_aux_loss_coef"] = c.moe_aux_loss_coeff;
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
    if (c.arch == "llama") {
      j["mlp_bias"] = false;
      j["pretraining_tp"] = 1;
    }
    llama3_special_tokens(j, c.vocab_size);
  }
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["initializer_range"] = c.init_std;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  return j;
}

namespace {

// Every value is checked for its JSON type before it is read: nlohmann would
// turn true into 1.0, wrap 2^64 - 1 into -1 and truncate 12.5 into 12.
[[noreturn]] void refuse(const std::string& key, const std::string& what) {
  throw Error("Hugging Face config: '" + key + "' " + what);
}

// Beside refuse(): a setting transformers applies and Stratum's models do not.
void require(bool ok, const std::string& key, const std::string& what) {
  if (!ok) refuse(key, what + "; Stratum's built-in models cannot represent it");
}

std::string shown(const Json& v) { return shorten_for_message(v.dump(), 60); }

// The value at `key`, or nullptr when absent (or null where null means
// transformers' default).
const Json* find(const Json& j, const std::string& key, bool null_is_absent) {
  const auto it = j.find(key);
  if (it == j.end()) return nullptr;
  return it->is_null() && null_is_absent ? nullptr : &*it;
}

// An integer in [min, max]; `path` names it in messages (e.g. "rope_scaling.factor").
int64_t int_value(const Json& v, const std::string& path, int64_t min, int64_t max) {
  if (v.is_null()) refuse(path, "is null; expected an integer");
  if (!v.is_number_integer())
    refuse(path, "is " + shown(v) + "; expected an integer (transformers builds no model from " +
                     (v.is_number_float() ? "a float" : v.is_boolean() ? "a boolean" : "a non-number") + " here)");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    refuse(path, "is " + shown(v) + ", beyond a 64-bit integer; probably not a model config");
  const int64_t n = v.get<int64_t>();
  if (n < min) refuse(path, "is " + std::to_string(n) + "; it must be at least " + std::to_string(min));
  if (n > max)
    refuse(path, "is " + std::to_string(n) + ", above " + std::to_string(max) +
                     ", Stratum's limit and far beyond any published model's; probably not a model config");
  return n;
}

// A dimension of the model: required, a positive integer at most `max`.
int64_t dimension(const Json& j, const std::string& key, int64_t max) {
  const Json* v = find(j, key, /*null_is_absent=*/false);
  if (!v) refuse(key, "is missing; a positive integer is required");
  return int_value(*v, key, 1, max);
}

// An optional dimension: absent or null means transformers' derived default.
std::optional<int64_t> optional_dimension(const Json& j, const std::string& key, int64_t max) {
  const Json* v = find(j, key, /*null_is_absent=*/true);
  if (!v) return std::nullopt;
  return int_value(*v, key, 1, max);
}

double number_value(const Json& v, const std::string& path) {
  if (!v.is_number()) refuse(path, "is " + shown(v) + "; expected a number");
  return v.get<double>();
}

// A number, `def` when absent; null refused (transformers would fail on None).
double number_or(const Json& j, const std::string& key, double def, const std::string& path_prefix = "") {
  const Json* v = find(j, key, /*null_is_absent=*/false);
  return v ? number_value(*v, path_prefix + key) : def;
}

double positive_number_or(const Json& j, const std::string& key, double def) {
  const double x = number_or(j, key, def);
  if (!(x > 0)) refuse(key, "is " + std::to_string(x) + "; it must be positive");
  return x;
}

// A dropout probability in [0, 1), as torch.nn.Dropout takes it (it refuses
// p < 0; p = 1 would drop everything).
double probability_or(const Json& j, const std::string& key, double def) {
  const double p = number_or(j, key, def);
  if (!(p >= 0 && p < 1)) refuse(key, "is " + std::to_string(p) + "; a dropout probability must be in [0, 1)");
  return p;
}

bool bool_or(const Json& j, const std::string& key, bool def) {
  const Json* v = find(j, key, /*null_is_absent=*/false);
  if (!v) return def;
  if (!v->is_boolean()) refuse(key, "is " + shown(*v) + "; expected true or false");
  return v->get<bool>();
}

std::string string_or(const Json& j, const std::string& key, const std::string& def, const std::string& path) {
  const Json* v = find(j, key, /*null_is_absent=*/false);
  if (!v) return def;
  if (!v->is_string()) refuse(path, "is " + shown(*v) + "; expected a string");
  return v->get<std::string>();
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds rope_theta).
struct Rope {
  std::string type = "default";
  double factor = 0, low = 1, high = 4;
  int64_t original = 8192;
  bool operator==(const Rope& o) const {
    return type == o.type && factor == o.factor && low == o.low && high == o.high && original == o.original;
  }
};

// The llama3 keys transformers' _validate_llama3_parameters requires (a
// KeyError there when one is missing); the ranges it warns of are refused.
void read_llama3(const Json& r, const std::string& key, Rope& rope) {
  auto required = [&](const char* name) -> const Json& {
    const Json* v = find(r, name, /*null_is_absent=*/false);
    if (!v)
      refuse(key + "." + name, "is missing; rope_type 'llama3' needs factor, low_freq_factor, high_freq_factor and "
                               "original_max_position_embeddings (transformers refuses it too)");
    return *v;
  };
  rope.factor = number_value(required("factor"), key + ".factor");
  rope.low = number_value(required("low_freq_factor"), key + ".low_freq_factor");
  rope.high = number_value(required("high_freq_factor"), key + ".high_freq_factor");
  rope.original = int_value(required("original_max_position_embeddings"), key + ".original_max_position_embeddings", 1,
                            kMaxSeqLen);
  if (!(rope.factor >= 1)) refuse(key + ".factor", "is " + std::to_string(rope.factor) + "; it must be at least 1");
  if (!(rope.low > 0)) refuse(key + ".low_freq_factor", "is " + std::to_string(rope.low) + "; it must be positive");
  if (!(rope.high > rope.low))
    refuse(key + ".high_freq_factor", "is " + std::to_string(rope.high) + "; it must be above low_freq_factor (" +
                                          std::to_string(rope.low) + ")");
}

// nullopt when `key` is absent or null.
std::optional<Rope> read_rope(const Json& j, const std::string& key) {
  const Json* r = find(j, key, /*null_is_absent=*/true);
  if (!r) return std::nullopt;
  if (!r->is_object()) refuse(key, "is " + shown(*r) + "; expected an object (or null)");
  Rope rope;
  const std::string rope_type = string_or(*r, "rope_type", "", key + ".rope_type");
  const std::string legacy_type = string_or(*r, "type", "", key + ".type");  // transformers 4's first spelling
  if (!rope_type.empty() && !legacy_type.empty() && rope_type != legacy_type)
    refuse(key + ".rope_type", "is '" + rope_type + "' but " + key + ".type is '" + legacy_type + "'; keep one");
  rope.type = !rope_type.empty() ? rope_type : !legacy_type.empty() ? legacy_type : "default";
  const std::string type_key = key + (rope_type.empty() && !legacy_type.empty() ? ".type" : ".rope_type");
  // partial_rotary_factor: transformers rotates only that part of each head.
  if (number_or(*r, "partial_rotary_factor", 1.0, key + ".") != 1.0)
    refuse(key + ".partial_rotary_factor", "is not 1; Stratum's LLaMA rotates whole heads");
  if (rope.type == "default") return rope;
  require(rope.type == "llama3", type_key,
          "is '" + rope.type + "' (only 'llama3' scaling is supported; not linear, dynamic, yarn, longrope)");
  read_llama3(*r, key, rope);
  return rope;
}

// Both spellings given must say the same: transformers reads one of them.
void read_rope_scaling(const Json& j, ModelConfig& c) {
  const std::optional<Rope> v5 = read_rope(j, "rope_parameters"), v4 = read_rope(j, "rope_scaling");
  if (v5 && v4 && !(*v5 == *v4))
    refuse("rope_parameters", "and 'rope_scaling' disagree (rope type '" + v5->type + "' vs '" + v4->type +
                                  "' or their factors); transformers would use one and ignore the other: keep one");
  const std::optional<Rope> rope = v5 ? v5 : v4;
  if (!rope || rope->type == "default") return;
  c.rope_scaling_factor = rope->factor;
  c.rope_low_freq_factor = rope->low;
  c.rope_high_freq_factor = rope->high;
  c.rope_original_max_seq_len = rope->original;
}

// rope_theta at the top (transformers 4) or in rope_parameters / rope_scaling.
double read_rope_theta(const Json& j) {
  std::optional<double> theta;
  std::string from;
  for (const std::string key : {"rope_theta", "rope_parameters", "rope_scaling"}) {
    const Json* holder = key == "rope_theta" ? &j : find(j, key, /*null_is_absent=*/true);
    if (!holder || !holder->is_object()) continue;
    const std::string path = key == "rope_theta" ? "rope_theta" : key + ".rope_theta";
    const Json* v = find(*holder, "rope_theta", /*null_is_absent=*/false);
    if (!v) continue;
    const double t = number_value(*v, path);
    if (!(t > 0)) refuse(path, "is " + std::to_string(t) + "; it must be positive");
    if (theta && *theta != t)
      refuse(path, "is " + std::to_string(t) + " but '" + from + "' is " + std::to_string(*theta) +
                       "; transformers would use one and ignore the other: keep one");
    theta = t;
    from = path;
  }
  return theta.value_or(10000.0);
}

void read_gpt2(const Json& j, ModelConfig& c) {
  c.arch = "gpt2";
  c.vocab_size = dimension(j, "vocab_size", kMaxVocabSize);
  c.max_seq_len = dimension(j, "n_positions", kMaxSeqLen);
  c.hidden = dimension(j, "n_embd", kMaxHidden);
  c.layers = dimension(j, "n_layer", kMaxLayers);
  c.heads = dimension(j, "n_head", c.hidden);
  c.kv_heads = c.heads;
  c.ffn_hidden = optional_dimension(j, "n_inner", kMaxFfnHidden).value_or(4 * c.hidden);
  const std::string act = string_or(j, "activation_function", "gelu_new", "activation_function");
  require(act == "gelu_new" || act == "gelu_pytorch_tanh", "activation_function",
          "is '" + act + "' (Stratum's GPT-2 uses the tanh GELU: gelu_new, gelu_pytorch_tanh)");
  require(!bool_or(j, "scale_attn_by_inverse_layer_idx", false), "scale_attn_by_inverse_layer_idx", "is true");
  require(bool_or(j, "scale_attn_weights", true), "scale_attn_weights", "is false");
  require(!bool_or(j, "add_cross_attention", false), "add_cross_attention", "is true");
  (void)bool_or(j, "reorder_and_upcast_attn", false);  // fp32 attention: the same function, either way
  c.norm_eps = positive_number_or(j, "layer_norm_epsilon", 1e-5);
  // GPT2Config's defaults are 0.1 each; one dropout serves embedding and residual here.
  c.dropout = probability_or(j, "resid_pdrop", 0.1);
  if (const double embd = probability_or(j, "embd_pdrop", 0.1); embd != c.dropout)
    refuse("embd_pdrop", "is " + std::to_string(embd) + " but 'resid_pdrop' is " + std::to_string(c.dropout) +
                             "; Stratum's GPT-2 has one dropout for both: give them the same value");
  if (const double attn = probability_or(j, "attn_pdrop", 0.1); attn != c.dropout) c.attention_dropout = attn;
  c.rope_theta = 0;
}

// Sliding-window attention (Mistral, Qwen2 configs) attends to fewer positions.
void refuse_sliding_window(const Json& j) {
  if (bool_or(j, "use_sliding_window", false))
    refuse("use_sliding_window", "is true; Stratum's LLaMA attends to every earlier position");
  const Json* w = find(j, "sliding_window", /*null_is_absent=*/true);
  if (w && !j.contains("use_sliding_window"))
    refuse("sliding_window", "is " + shown(*w) + "; Stratum's LLaMA attends to every earlier position (null: none)");
}

void read_llama(const Json& j, ModelConfig& c) {
  c.vocab_size = dimension(j, "vocab_size", kMaxVocabSize);
  c.max_seq_len = dimension(j, "max_position_embeddings", kMaxSeqLen);
  c.hidden = dimension(j, "hidden_size", kMaxHidden);
  c.layers = dimension(j, "num_hidden_layers", kMaxLayers);
  c.heads = dimension(j, "num_attention_heads", c.hidden);
  c.kv_heads = optional_dimension(j, "num_key_value_heads", c.heads).value_or(c.heads);
  c.ffn_hidden = dimension(j, "intermediate_size", kMaxFfnHidden);
  if (const auto head_dim = optional_dimension(j, "head_dim", kMaxHidden)) {
    // Qwen3's heads have their own width; LLaMA's and Mixtral's are hidden / heads.
    if (c.arch == "qwen3_moe") {
      if (c.hidden % c.heads != 0 || *head_dim != c.hidden / c.heads) c.explicit_head_dim = *head_dim;
    } else {
      require(c.hidden % c.heads == 0 && *head_dim == c.hidden / c.heads, "head_dim",
              "is " + std::to_string(*head_dim) + ", not hidden_size / num_attention_heads");
    }
  }
  const std::string act = string_or(j, "hidden_act", "silu", "hidden_act");
  require(act == "silu" || act == "swish", "hidden_act", "is '" + act + "', not 'silu'");
  require(!bool_or(j, "attention_bias", false), "attention_bias", "is true");
  if (c.arch == "llama") require(!bool_or(j, "mlp_bias", false), "mlp_bias", "is true");
  // pretraining_tp > 1 only splits transformers' matmuls (a summation order;
  // current versions ignore it): the same model, so any positive value is taken.
  if (const Json* tp = find(j, "pretraining_tp", /*null_is_absent=*/true)) int_value(*tp, "pretraining_tp", 1, INT64_MAX);
  if (number_or(j, "partial_rotary_factor", 1.0) != 1.0)
    refuse("partial_rotary_factor", "is not 1; Stratum's LLaMA rotates whole heads");
  refuse_sliding_window(j);
  c.norm_eps = positive_number_or(j, "rms_norm_eps", 1e-6);
  c.rope_theta = read_rope_theta(j);
  read_rope_scaling(j, c);
  c.dropout = probability_or(j, "attention_dropout", 0.0);
}

// The count of experts: Mixtral's num_local_experts, Qwen3-MoE's num_experts
// (transformers 5 writes both spellings for either); both given must agree.
int64_t read_num_experts(const Json& j, const char* key) {
  std::optional<int64_t> n;
  std::string from;
  for (const char* k : {"num_local_experts", "num_experts"}) {
    const Json* v = find(j, k, /*null_is_absent=*/true);
    if (!v) continue;
    const int64_t e = int_value(*v, k, 1, kMaxExperts);
    if (n && *n != e) refuse(k, "is " + std::to_string(e) + " but '" + from + "' is " + std::to_string(*n) + "; keep one");
    n = e;
    from = k;
  }
  if (!n) refuse(key, "is missing; the number of experts is required");
  return *n;
}

// Mixtral: LLaMA's blocks with a mixture of experts of intermediate_size.
void read_mixtral(const Json& j, ModelConfig& c) {
  c.arch = "mixtral";
  read_llama(j, c);
  c.num_experts = read_num_experts(j, "num_local_experts");
  c.top_k = int_value(find(j, "num_experts_per_tok", false) ? j.at("num_experts_per_tok") : Json(2),
                      "num_experts_per_tok", 1, c.num_experts);
  c.moe_ffn_hidden = c.ffn_hidden;
  c.norm_topk_prob = true;  // Mixtral's weights: a softmax over the chosen experts' logits
  if (number_or(j, "router_jitter_noise", 0.0) != 0.0)
    refuse("router_jitter_noise", "is not 0; Stratum's router multiplies no noise into its input");
}

// Qwen3-MoE: Qwen3's attention (q/k norms, head_dim of its own) and a
// mixture of experts of moe_intermediate_size in every layer.
void read_qwen3_moe(const Json& j, ModelConfig& c) {
  c.arch = "qwen3_moe";
  read_llama(j, c);
  c.qk_norm = true;
  c.num_experts = read_num_experts(j, "num_experts");
  c.top_k = int_value(find(j, "num_experts_per_tok", false) ? j.at("num_experts_per_tok") : Json(8),
                      "num_experts_per_tok", 1, c.num_experts);
  c.moe_ffn_hidden = find(j, "moe_intermediate_size", true) ? dimension(j, "moe_intermediate_size", kMaxFfnHidden) : 768;
  c.norm_topk_prob = bool_or(j, "norm_topk_prob", false);
  if (const Json* step = find(j, "decoder_sparse_step", true))
    require(int_value(*step, "decoder_sparse_step", 1, INT64_MAX) == 1, "decoder_sparse_step",
            "is not 1 (dense MLPs between the sparse layers)");
  if (const Json* dense = find(j, "mlp_only_layers", true))
    require(dense->is_array() && dense->empty(), "mlp_only_layers", "lists dense layers (" + shown(*dense) + ")");
}

// A checkpoint saved quantized: bitsandbytes' 4-bit NF4 weights are read as
// stored (models/hf_state_dict.h: hf_parameters); any other scheme is
// refused by key rather than read as float weights.
void read_quantization(const Json& j) {
  const Json* q = find(j, "quantization_config", /*null_is_absent=*/true);
  if (!q) return;
  if (!q->is_object()) refuse("quantization_config", "is " + shown(*q) + ", not an object");
  const std::string method = string_or(*q, "quant_method", "", "quantization_config.quant_method");
  if (method != "bitsandbytes")
    refuse("quantization_config.quant_method",
           "is '" + method + "'; Stratum reads checkpoints quantized by bitsandbytes in 4-bit NF4 only");
  if (bool_or(*q, "load_in_8bit", false))
    refuse("quantization_config.load_in_8bit", "is true; Stratum reads bitsandbytes' 4-bit NF4, not its 8-bit weights");
  if (!bool_or(*q, "load_in_4bit", false)) refuse("quantization_config.load_in_4bit", "is not true");
  const std::string type = string_or(*q, "bnb_4bit_quant_type", "fp4", "quantization_config.bnb_4bit_quant_type");
  if (type != "nf4") refuse("quantization_config.bnb_4bit_quant_type", "is '" + type + "'; only NF4 weights load");
}

}  // namespace

ModelConfig model_config_from_hf(const Json& j, const std::string& name) {
  if (!j.is_object()) throw Error("Hugging Face config: not a JSON object");
  const Json* type_value = find(j, "model_type", /*null_is_absent=*/false);
  if (!type_value) refuse("model_type", "is missing (gpt2, llama, mixtral or qwen3_moe)");
  const std::string type = string_or(j, "model_type", "", "model_type");
  ModelConfig c;
  c.name = name;
  if (type == "gpt2") {
    read_gpt2(j, c);
  } else if (type == "llama") {
    c.arch = "llama";
    read_llama(j, c);
  } else if (type == "mixtral") {
    read_mixtral(j, c);
  } else if (type == "qwen3_moe") {
    read_qwen3_moe(j, c);
  } else {
    const std::string escaped = Json(type).dump();  // a NUL or control byte shown escaped
    throw Error("Hugging Face config: model_type '" + shorten_for_message(escaped.substr(1, escaped.size() - 2), 60) +
                "' is not supported (gpt2, llama, mixtral, qwen3_moe)");
  }
  read_quantization(j);
  c.tie_embeddings = bool_or(j, "tie_word_embeddings", type == "gpt2");  // LlamaConfig defaults to untied
  c.init_std = positive_number_or(j, "initializer_range", 0.02);
  validate(c);
  return c;
}

ModelConfig read_hf_model_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const Json j = read_json_file(path, kMaxHfConfigBytes, "a Hugging Face config.json");
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
