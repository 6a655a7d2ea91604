#include "stratum/models/model_config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>

#include "stratum/config/key_reader.h"  // did_you_mean
#include "stratum/core/error.h"
#include "stratum/nn/tensor_parallel/vocab_padding.h"

namespace stratum::models {

namespace {

ModelConfig gpt2(const std::string& name, int64_t vocab, int64_t seq, int64_t hidden, int64_t layers, int64_t heads) {
  ModelConfig c;
  c.name = name;
  c.arch = "gpt2";
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.hidden = hidden;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = heads;
  c.ffn_hidden = 4 * hidden;
  c.norm_eps = 1e-5;  // GPT-2's layer_norm_epsilon
  c.rope_theta = 0;   // unused
  c.tie_embeddings = true;
  return c;
}

ModelConfig llama(const std::string& name, int64_t vocab, int64_t seq, int64_t hidden, int64_t layers, int64_t heads,
                  int64_t kv_heads, int64_t ffn, double theta, bool tied) {
  ModelConfig c;
  c.name = name;
  c.arch = "llama";
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.hidden = hidden;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.ffn_hidden = ffn;
  c.norm_eps = 1e-5;
  c.rope_theta = theta;
  c.tie_embeddings = tied;
  return c;
}

// LLaMA's blocks with a mixture of `experts` SwiGLU experts of `ffn`, `top_k` a token.
ModelConfig moe(ModelConfig c, const std::string& arch, int64_t experts, int64_t top_k, int64_t ffn) {
  c.arch = arch;
  c.num_experts = experts;
  c.top_k = top_k;
  c.moe_ffn_hidden = ffn;
  return c;
}

// Qwen3's attention: q/k norms, heads `head_dim` wide; its RMSNorm epsilon.
ModelConfig qwen3(ModelConfig c, int64_t head_dim) {
  c.explicit_head_dim = head_dim;
  c.qk_norm = true;
  c.norm_eps = 1e-6;
  return c;
}

const std::vector<ModelConfig>& presets() {
  static const std::vector<ModelConfig> all = [] {
    std::vector<ModelConfig> p;
    p.push_back(gpt2("tiny-gpt2", 256, 64, 64, 2, 4));
    p.push_back(llama("tiny-llama", 256, 64, 64, 2, 4, 2, 128, 10000, true));
    p.push_back(gpt2("gpt2-tiny-bytes", 256, 256, 128, 4, 4));
    ModelConfig main_job = gpt2("gpt2-38m-bytes", 256, 256, 512, 12, 8);  // the main job on a GPU:
    main_job.dropout = 0.1;  // 38M parameters on a 237 KB corpus overfit without it
    p.push_back(main_job);
    p.push_back(gpt2("gpt2-124m", 50257, 1024, 768, 12, 12));
    p.push_back(gpt2("gpt2-350m", 50257, 1024, 1024, 24, 16));
    p.push_back(gpt2("gpt2-1.3b", 50257, 2048, 2048, 24, 16));
    ModelConfig llama_1b = llama("llama-1b", 128256, 131072, 2048, 16, 32, 8, 8192, 500000, true);
    llama_1b.rope_scaling_factor = 32;  // Llama 3.2's rope_scaling
    llama_1b.rope_low_freq_factor = 1;
    llama_1b.rope_high_freq_factor = 4;
    llama_1b.rope_original_max_seq_len = 8192;
    p.push_back(llama_1b);
    p.push_back(llama("llama-8b", 128256, 8192, 4096, 32, 32, 8, 14336, 500000, false));
    // Shapes for planning (stratum-estimate): Llama 3's 70B, and GPT-3's 175B
    // (Brown et al.: 96 layers of 12288, 96 heads, 2048 positions) as a dense GPT-2.
    p.push_back(llama("llama-70b", 128256, 8192, 8192, 80, 64, 8, 28672, 500000, false));
    p.push_back(gpt2("gpt3-175b", 50257, 2048, 12288, 96, 96));
    p.push_back(moe(llama("tiny-mixtral", 256, 64, 64, 2, 4, 2, 96, 10000, false), "mixtral", 4, 2, 96));
    p.push_back(qwen3(moe(llama("tiny-qwen3-moe", 256, 64, 64, 2, 4, 2, 128, 10000, false), "qwen3_moe", 8, 2, 32), 32));
    p.push_back(moe(llama("mixtral-8x7b", 32000, 32768, 4096, 32, 32, 8, 14336, 1e6, false), "mixtral", 8, 2, 14336));
    p.push_back(
        qwen3(moe(llama("qwen3-30b-a3b", 151936, 40960, 2048, 48, 32, 4, 6144, 1e6, false), "qwen3_moe", 128, 8, 768),
              128));
    return p;
  }();
  return all;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

int64_t parse_positive_int(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || v <= 0)
    throw Error("model override '" + key + "': expected a positive integer, got '" + value + "'");
  return v;
}

// 0 (off) or a positive count.
int64_t parse_nonnegative_int(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || v < 0)
    throw Error("model override '" + key + "': expected a non-negative integer (0: off), got '" + value + "'");
  return v;
}

double parse_double(const std::string& key, const std::string& value, double min, bool min_inclusive, double max) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  const bool above = min_inclusive ? v >= min : v > min;
  if (value.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || !above || v >= max)
    throw Error("model override '" + key + "': expected a number " + (min_inclusive ? ">= " : "> ") +
                std::to_string(min) + (std::isfinite(max) ? " and < " + std::to_string(max) : "") + ", got '" +
                value + "'");
  return v;
}

std::string parse_choice(const std::string& key, const std::string& value, const std::vector<std::string>& choices) {
  for (const auto& c : choices)
    if (value == c) return value;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : " or ") + c;
  throw Error("model override '" + key + "': expected " + list + ", got '" + value + "'");
}

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  throw Error("model override '" + key + "': expected true or false, got '" + value + "'");
}

using Setter = std::function<void(ModelConfig&, const std::string& key, const std::string& value)>;

const std::map<std::string, Setter>& setters() {
  constexpr double inf = HUGE_VAL;
  static const std::map<std::string, Setter> all = {
      {"vocab_size", [](ModelConfig& c, auto& k, auto& v) { c.vocab_size = parse_positive_int(k, v); }},
      {"max_seq_len", [](ModelConfig& c, auto& k, auto& v) { c.max_seq_len = parse_positive_int(k, v); }},
      {"hidden", [](ModelConfig& c, auto& k, auto& v) { c.hidden = parse_positive_int(k, v); }},
      {"layers", [](ModelConfig& c, auto& k, auto& v) { c.layers = parse_positive_int(k, v); }},
      {"heads", [](ModelConfig& c, auto& k, auto& v) { c.heads = parse_positive_int(k, v); }},
      {"kv_heads", [](ModelConfig& c, auto& k, auto& v) { c.kv_heads = parse_positive_int(k, v); }},
      {"ffn_hidden", [](ModelConfig& c, auto& k, auto& v) { c.ffn_hidden = parse_positive_int(k, v); }},
      {"norm_eps", [](ModelConfig& c, auto& k, auto& v) { c.norm_eps = parse_double(k, v, 0, false, inf); }},
      {"rope_theta", [](ModelConfig& c, auto& k, auto& v) { c.rope_theta = parse_double(k, v, 0, false, inf); }},
      {"init_std", [](ModelConfig& c, auto& k, auto& v) { c.init_std = parse_double(k, v, 0, false, inf); }},
      {"dropout", [](ModelConfig& c, auto& k, auto& v) { c.dropout = parse_double(k, v, 0, true, 1); }},
      {"attention_dropout",
       [](ModelConfig& c, auto& k, auto& v) { c.attention_dropout = parse_double(k, v, 0, true, 1); }},
      {"tie_embeddings", [](ModelConfig& c, auto& k, auto& v) { c.tie_embeddings = parse_bool(k, v); }},
      {"recompute_mlp_activation",
       [](ModelConfig& c, auto& k, auto& v) { c.recompute_mlp_activation = parse_bool(k, v); }},
      {"tiled_mlp_tokens", [](ModelConfig& c, auto& k, auto& v) { c.tiled_mlp_tokens = parse_nonnegative_int(k, v); }},
      {"tiled_loss_tokens",
       [](ModelConfig& c, auto& k, auto& v) { c.tiled_loss_tokens = parse_nonnegative_int(k, v); }},
      {"rope_scaling_factor",
       [](ModelConfig& c, auto& k, auto& v) { c.rope_scaling_factor = parse_double(k, v, 0, true, inf); }},
      {"rope_low_freq_factor",
       [](ModelConfig& c, auto& k, auto& v) { c.rope_low_freq_factor = parse_double(k, v, 0, false, inf); }},
      {"rope_high_freq_factor",
       [](ModelConfig& c, auto& k, auto& v) { c.rope_high_freq_factor = parse_double(k, v, 0, false, inf); }},
      {"rope_original_max_seq_len",
       [](ModelConfig& c, auto& k, auto& v) { c.rope_original_max_seq_len = parse_positive_int(k, v); }},
      {"head_dim", [](ModelConfig& c, auto& k, auto& v) { c.explicit_head_dim = parse_positive_int(k, v); }},
      {"qk_norm", [](ModelConfig& c, auto& k, auto& v) { c.qk_norm = parse_bool(k, v); }},
      {"num_experts", [](ModelConfig& c, auto& k, auto& v) { c.num_experts = parse_positive_int(k, v); }},
      {"top_k", [](ModelConfig& c, auto& k, auto& v) { c.top_k = parse_positive_int(k, v); }},
      {"moe_ffn_hidden", [](ModelConfig& c, auto& k, auto& v) { c.moe_ffn_hidden = parse_positive_int(k, v); }},
      {"shared_expert_ffn_hidden",
       [](ModelConfig& c, auto& k, auto& v) { c.shared_expert_ffn_hidden = parse_positive_int(k, v); }},
      {"router_score",
       [](ModelConfig& c, auto& k, auto& v) { c.router_score = parse_choice(k, v, {"softmax", "sigmoid"}); }},
      {"norm_topk_prob", [](ModelConfig& c, auto& k, auto& v) { c.norm_topk_prob = parse_bool(k, v); }},
      {"router_groups", [](ModelConfig& c, auto& k, auto& v) { c.router_groups = parse_positive_int(k, v); }},
      {"router_top_groups", [](ModelConfig& c, auto& k, auto& v) { c.router_top_groups = parse_positive_int(k, v); }},
      {"routed_scaling_factor",
       [](ModelConfig& c, auto& k, auto& v) { c.routed_scaling_factor = parse_double(k, v, 0, false, inf); }},
  };
  return all;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

ModelConfig preset(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return p;
  throw Error("unknown model '" + name + "'" + config::did_you_mean(name, preset_names()) +
              "; known models: " + quoted_list(preset_names()));
}

std::vector<std::string> override_keys() {
  std::vector<std::string> keys;
  for (const auto& [key, setter] : setters()) keys.push_back(key);
  return keys;
}

void apply_override(ModelConfig& config, const std::string& key, const std::string& value) {
  auto it = setters().find(key);
  if (it == setters().end())
    throw Error("unknown model override '" + key + "'" + config::did_you_mean(key, override_keys()) +
                "; known keys: " + quoted_list(override_keys()));
  it->second(config, key, value);
}

std::pair<std::string, std::string> parse_override(const std::string& key_equals_value) {
  const size_t eq = key_equals_value.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("model override '" + key_equals_value + "': expected key=value (e.g. layers=4)");
  return {key_equals_value.substr(0, eq), key_equals_value.substr(eq + 1)};
}

ModelConfig make_model_config(const std::string& preset_name,
                              const std::vector<std::pair<std::string, std::string>>& overrides) {
  ModelConfig c = preset(preset_name);
  std::set<std::string> given;
  for (const auto& [key, value] : overrides) {
    apply_override(c, key, value);
    given.insert(key);
  }
  if (c.arch == "gpt2") {
    if (given.count("hidden") && !given.count("ffn_hidden")) c.ffn_hidden = 4 * c.hidden;
    if (given.count("heads") && !given.count("kv_heads")) c.kv_heads = c.heads;
  }
  validate(c);
  return c;
}

namespace {

// "vocab_size 1000000000000 is above 4194304 (2^22), Stratum's limit: ..."
std::string beyond_limit(const std::string& key, int64_t value, int64_t limit, int log2) {
  return key + " " + std::to_string(value) + " is above " + std::to_string(limit) + " (2^" + std::to_string(log2) +
         "), Stratum's limit and far beyond any published model's; a file giving it is probably not a model config";
}

// Saturating int64 arithmetic: parameter_count of a shape validate() has not
// yet seen (or refused) must not overflow (undefined behaviour).
int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
  return r;
}
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return a < 0 ? INT64_MIN : INT64_MAX;
  return r;
}
int64_t sat_sum(std::initializer_list<int64_t> terms) {
  int64_t s = 0;
  for (int64_t t : terms) s = sat_add(s, t);
  return s;
}

// A block's feed-forward parameters: gate, up, down; a mixture of experts'
// router, experts (top_k of them when `active`) and shared experts.
int64_t mlp_parameters(const ModelConfig& c, bool active) {
  const int64_t C = c.hidden;
  if (!c.is_moe()) return sat_mul(3, sat_mul(C, c.ffn_hidden));
  const int64_t expert = sat_mul(3, sat_mul(C, c.moe_ffn_hidden));
  return sat_sum({sat_mul(c.num_experts, C),                              // router
                  sat_mul(active ? c.top_k : c.num_experts, expert),      // experts
                  sat_mul(3, sat_mul(C, c.shared_expert_ffn_hidden))});   // shared experts
}

}  // namespace

void validate(const ModelConfig& c) {
  std::vector<std::string> problems;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) problems.push_back(what);
  };
  need(c.arch == "gpt2" || c.llama_family(),
       "arch '" + c.arch + "' is not one of 'gpt2', 'llama', 'mixtral', 'qwen3_moe'");
  need(c.vocab_size > 0, "vocab_size must be positive");
  need(c.max_seq_len > 0, "max_seq_len must be positive");
  need(c.hidden > 0, "hidden must be positive");
  need(c.layers > 0, "layers must be positive");
  need(c.heads > 0, "heads must be positive");
  need(c.kv_heads > 0, "kv_heads must be positive");
  need(c.ffn_hidden > 0, "ffn_hidden must be positive");
  need(c.vocab_size <= kMaxVocabSize, beyond_limit("vocab_size", c.vocab_size, kMaxVocabSize, 22));
  need(c.max_seq_len <= kMaxSeqLen, beyond_limit("max_seq_len", c.max_seq_len, kMaxSeqLen, 24));
  need(c.hidden <= kMaxHidden, beyond_limit("hidden", c.hidden, kMaxHidden, 17));
  need(c.layers <= kMaxLayers, beyond_limit("layers", c.layers, kMaxLayers, 12));
  need(c.ffn_hidden <= kMaxFfnHidden, beyond_limit("ffn_hidden", c.ffn_hidden, kMaxFfnHidden, 20));
  need(c.heads <= c.hidden || c.hidden <= 0 || c.explicit_head_dim > 0, "heads (" + std::to_string(c.heads) + ") must be at most hidden (" +
                                                 std::to_string(c.hidden) + "): a head has at least one dimension");
  if (c.hidden > 0 && c.heads > 0 && c.explicit_head_dim == 0)
    need(c.hidden % c.heads == 0, "hidden (" + std::to_string(c.hidden) + ") must be a multiple of heads (" +
                                      std::to_string(c.heads) + ")");
  if (c.heads > 0 && c.kv_heads > 0)
    need(c.heads % c.kv_heads == 0, "heads (" + std::to_string(c.heads) + ") must be a multiple of kv_heads (" +
                                        std::to_string(c.kv_heads) + ")");
  need(c.norm_eps > 0 && std::isfinite(c.norm_eps), "norm_eps must be positive and finite");
  need(c.init_std > 0 && std::isfinite(c.init_std), "init_std must be positive and finite");
  need(c.dropout >= 0 && c.dropout < 1, "dropout must be in [0, 1)");
  need(c.attention_dropout < 1, "attention_dropout must be in [0, 1)");
  need(c.tiled_mlp_tokens >= 0, "tiled_mlp_tokens must be >= 0 (0: off), got " + std::to_string(c.tiled_mlp_tokens));
  need(c.tiled_loss_tokens >= 0,
       "tiled_loss_tokens must be >= 0 (0: off), got " + std::to_string(c.tiled_loss_tokens));
  if (c.arch == "gpt2") {
    need(c.kv_heads == c.heads, "kv_heads (" + std::to_string(c.kv_heads) + ") must equal heads (" +
                                    std::to_string(c.heads) + ") for gpt2: grouped-query attention is LLaMA's");
  }
  if (c.arch == "gpt2" || c.arch == "llama")
    need(c.num_experts == 0, "num_experts " + std::to_string(c.num_experts) + ": arch '" + c.arch +
                                 "' is dense; a mixture of experts is arch 'mixtral' or 'qwen3_moe'");
  if (c.arch == "mixtral" || c.arch == "qwen3_moe") {
    const std::string e = std::to_string(c.num_experts);
    need(c.num_experts > 0, "arch '" + c.arch + "' needs num_experts > 0");
    need(c.num_experts <= kMaxExperts, beyond_limit("num_experts", c.num_experts, kMaxExperts, 16));
    need(c.top_k >= 1 && c.top_k <= c.num_experts,
         "top_k " + std::to_string(c.top_k) + " must be between 1 and num_experts (" + e + ")");
    need(c.moe_ffn_hidden > 0, "moe_ffn_hidden must be positive");
    need(c.moe_ffn_hidden <= kMaxFfnHidden, beyond_limit("moe_ffn_hidden", c.moe_ffn_hidden, kMaxFfnHidden, 20));
    need(c.shared_expert_ffn_hidden >= 0 && c.shared_expert_ffn_hidden <= kMaxFfnHidden,
         "shared_expert_ffn_hidden must be in [0, " + std::to_string(kMaxFfnHidden) + "]");
    need(c.router_score == "softmax" || c.router_score == "sigmoid",
         "router_score '" + c.router_score + "' is neither 'softmax' nor 'sigmoid'");
    need(c.router_groups >= 1 && c.num_experts % std::max<int64_t>(c.router_groups, 1) == 0,
         "router_groups " + std::to_string(c.router_groups) + " must divide num_experts (" + e + ")");
    need(c.router_top_groups >= 1 && c.router_top_groups <= c.router_groups,
         "router_top_groups " + std::to_string(c.router_top_groups) + " must be between 1 and router_groups (" +
             std::to_string(c.router_groups) + ")");
    if (c.router_groups > 1 && c.num_experts % c.router_groups == 0)
      need(c.num_experts / c.router_groups * c.router_top_groups >= c.top_k,
           "the top router_top_groups (" + std::to_string(c.router_top_groups) + ") groups hold fewer experts than top_k (" +
               std::to_string(c.top_k) + ")");
    need(c.routed_scaling_factor > 0 && std::isfinite(c.routed_scaling_factor),
         "routed_scaling_factor must be positive and finite");
    need(c.moe_capacity_factor >= 0 && std::isfinite(c.moe_capacity_factor),
         "moe capacity_factor must be 0 (dropless) or positive");
    need(c.moe_drop_policy == "probs" || c.moe_drop_policy == "position",
         "moe drop_policy '" + c.moe_drop_policy + "' is neither 'probs' nor 'position'");
    need(c.moe_load_balancing == "aux_loss" || c.moe_load_balancing == "seq_aux_loss" || c.moe_load_balancing == "none",
         "moe load_balancing '" + c.moe_load_balancing + "' is not 'aux_loss', 'seq_aux_loss' or 'none'");
    need(c.moe_aux_loss_coeff >= 0 && std::isfinite(c.moe_aux_loss_coeff), "moe aux_loss_coeff must be >= 0");
    need(c.moe_z_loss_coeff >= 0 && std::isfinite(c.moe_z_loss_coeff), "moe z_loss_coeff must be >= 0");
    need(c.moe_expert_bias_rate >= 0 && std::isfinite(c.moe_expert_bias_rate), "moe expert_bias_rate must be >= 0");
  }
  if (c.arch == "gpt2") {
    need(c.explicit_head_dim == 0 || c.explicit_head_dim * c.heads == c.hidden,
         "head_dim " + std::to_string(c.explicit_head_dim) + ": GPT-2's heads are hidden / heads wide");
    need(!c.qk_norm, "qk_norm: GPT-2 has no query/key norms");
  }
  need(c.explicit_head_dim <= kMaxHidden, beyond_limit("head_dim", c.explicit_head_dim, kMaxHidden, 17));
  if (c.llama_family()) {
    need(c.rope_theta > 0 && std::isfinite(c.rope_theta), "rope_theta must be positive and finite");
    if (c.rope_scaling_factor != 0) {
      need(c.rope_scaling_factor > 0 && std::isfinite(c.rope_scaling_factor),
           "rope_scaling_factor must be positive and finite (or 0: no scaling)");
      need(c.rope_low_freq_factor > 0 && c.rope_high_freq_factor > c.rope_low_freq_factor &&
               std::isfinite(c.rope_high_freq_factor),
           "rope_high_freq_factor must be above rope_low_freq_factor, both positive and finite");
      need(c.rope_original_max_seq_len > 0, "rope_original_max_seq_len must be positive");
      need(c.rope_original_max_seq_len <= kMaxSeqLen,
           beyond_limit("rope_original_max_seq_len", c.rope_original_max_seq_len, kMaxSeqLen, 24));
    }
    if (c.hidden > 0 && c.heads > 0 && (c.explicit_head_dim > 0 || c.hidden % c.heads == 0))
      need(c.head_dim() % 2 == 0, "head dimension (" + std::to_string(c.head_dim()) +
                                      ") must be even for rotary embeddings");
  }
  // The whole model, once each dimension is known to be in range (then no product overflows).
  if (problems.empty())
    need(parameter_count(c) <= kMaxParameters,
         std::to_string(parameter_count(c)) + " parameters are above " + std::to_string(kMaxParameters) +
             " (2^41), Stratum's limit and far beyond any published model's; a file giving this shape is probably "
             "not a model config");
  if (problems.empty()) return;
  std::string msg = "model '" + c.name + "' (" + c.arch + "): ";
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  throw Error(msg);
}

int64_t parameter_count(const ModelConfig& c) {
  const int64_t C = c.hidden, F = c.ffn_hidden, V = c.vocab_size, L = c.layers;
  const int64_t kv = sat_mul(c.kv_heads, c.head_dim());
  const int64_t CC = sat_mul(C, C), CF = sat_mul(C, F);
  const int64_t head = c.tie_embeddings ? 0 : sat_mul(V, C);
  if (c.arch == "gpt2") {
    const int64_t block = sat_sum({sat_mul(2, C),                    // ln_1
                                   sat_mul(3, CC), sat_mul(3, C),    // c_attn
                                   CC, C,                            // attn.c_proj
                                   sat_mul(2, C),                    // ln_2
                                   CF, F,                            // c_fc
                                   CF, C});                          // mlp.c_proj
    return sat_sum({sat_mul(V, C), sat_mul(c.max_seq_len, C), sat_mul(L, block), sat_mul(2, C), head});
  }
  const int64_t q = sat_mul(C, sat_mul(c.heads, c.head_dim()));
  const int64_t block = sat_sum({C,                                           // input_layernorm
                                 q, sat_mul(2, sat_mul(C, kv)), q,            // q, k, v, o
                                 c.qk_norm ? sat_mul(2, c.head_dim()) : 0,    // q_norm, k_norm
                                 C,                                           // post_attention_layernorm
                                 mlp_parameters(c, /*active=*/false)});
  return sat_sum({sat_mul(V, C), sat_mul(L, block), C, head});
}

int64_t active_parameter_count(const ModelConfig& c) {
  if (!c.is_moe()) return parameter_count(c);
  return sat_add(parameter_count(c),
                 -sat_mul(c.layers, mlp_parameters(c, false) - mlp_parameters(c, /*active=*/true)));
}

int64_t tensor_parallel_param_count(const ModelConfig& c, int64_t t) {
  if (t <= 1) return parameter_count(c);
  const int64_t C = c.hidden, F = c.ffn_hidden, L = c.layers;
  const int64_t V = nn::tp::vocab_rows_per_rank(c.vocab_size, t);
  const int64_t head = c.tie_embeddings ? 0 : V * C;
  if (c.arch == "gpt2") {
    const int64_t block = 2 * C                   // ln_1
                          + (3 * C * C + 3 * C) / t  // c_attn
                          + C * C / t + C            // attn.c_proj (its bias replicated)
                          + 2 * C                    // ln_2
                          + (C * F + F) / t          // c_fc
                          + F * C / t + C;           // mlp.c_proj
    return V * C + c.max_seq_len * C + L * block + 2 * C + head;
  }
  // Key/value heads split, or (fewer than ranks) one shared head each.
  const int64_t kv = (c.kv_heads % t == 0 ? c.kv_heads / t : 1) * c.head_dim();
  const int64_t q = C * c.heads * c.head_dim() / t;
  // A mixture of experts is replicated over the tensor-parallel group (its router and experts whole).
  const int64_t mlp = c.is_moe() ? mlp_parameters(c, false) : 3 * C * F / t;
  const int64_t block = C                              // input_layernorm
                        + q + 2 * C * kv + q              // q, k, v, o
                        + (c.qk_norm ? 2 * c.head_dim() : 0)  // q_norm, k_norm
                        + C                               // post_attention_layernorm
                        + mlp;                            // gate, up, down
  return V * C + L * block + C + head;
}

std::string describe(const ModelConfig& c) {
  std::string s = c.name + " (" + c.arch + "): " + std::to_string(c.layers) + " layers, " + std::to_string(c.hidden) +
                  " hidden, " + std::to_string(c.heads) + " heads";
  if (c.kv_heads != c.heads) s += " (" + std::to_string(c.kv_heads) + " kv)";
  if (c.explicit_head_dim > 0) s += ", head_dim " + std::to_string(c.explicit_head_dim);
  if (c.qk_norm) s += ", q/k norms";
  if (c.llama_family() && c.rope_scaling_factor > 0) {
    char factor[32];  // %g: a factor of any size (a cast to an integer overflows past 2^63)
    std::snprintf(factor, sizeof factor, "%g", c.rope_scaling_factor);
    s += std::string(", rope x") + factor;
  }
  if (c.is_moe())
    s += ", " + std::to_string(c.num_experts) + " experts of ffn " + std::to_string(c.moe_ffn_hidden) + " (top " +
         std::to_string(c.top_k) + (c.shared_expert_ffn_hidden > 0 ? ", shared ffn " + std::to_string(c.shared_expert_ffn_hidden) : "") + ")";
  else
    s += ", ffn " + std::to_string(c.ffn_hidden);
  s += ", vocab " + std::to_string(c.vocab_size) + ", seq " +
       std::to_string(c.max_seq_len) + (c.tie_embeddings ? ", tied" : ", untied") + "; " +
       with_commas(parameter_count(c)) + " parameters";
  if (c.is_moe()) s += " (" + with_commas(active_parameter_count(c)) + " active a token)";
  return s;
}

}  // namespace stratum::models
