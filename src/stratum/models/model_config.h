#pragma once
// The shape of a built-in model: a preset by name plus overrides of any
// dimension ("layers=4", "hidden=256", ...). No torch here: the analytic
// parameter count serves estimators without building anything.
//
// Presets (parameter counts with the architecture's formula; see parameter_count):
//   tiny-gpt2        vocab 256, seq 64, 64 hidden, 2 layers, 4 heads: unit tests
//   tiny-llama       vocab 256, seq 64, 64 hidden, 2 layers, 4 heads, 2 kv heads, ffn 128: unit tests
//   gpt2-tiny-bytes  vocab 256 (byte-level tokens), seq 256, 128 hidden, 4 layers, 4 heads:
//                    the default job of `make run`, a few minutes on 2 CPU ranks
//   gpt2-124m        GPT-2 small: vocab 50257, seq 1024, 768 hidden, 12 layers, 12 heads (124,439,808)
//   gpt2-350m        GPT-2 medium: 1024 hidden, 24 layers, 16 heads (354,823,168)
//   gpt2-1.3b        GPT-3 XL's shape (2048 hidden, 24 layers, 16 heads of 128, seq 2048) in
//                    GPT-2's architecture (1,315,723,264); not GPT-2 XL (1600 x 48, 1.56B)
//   llama-1b         Llama 3.2 1B: vocab 128256, 2048 hidden, 16 layers, 32 heads, 8 kv heads,
//                    ffn 8192, rope theta 500000 with "llama3" scaling (factor 32 from 8192),
//                    seq 131072, tied embeddings (1,235,814,400)
//   llama-8b         Llama 3 8B (not 3.1): 4096 hidden, 32 layers, 32 heads, 8 kv heads, ffn 14336,
//                    plain RoPE, seq 8192, untied (8,030,261,248)
//   tiny-mixtral     vocab 256, seq 64, 64 hidden, 2 layers, 4 heads, 2 kv heads, 4 experts of
//                    ffn 96, top 2: unit tests
//   tiny-qwen3-moe   vocab 256, seq 64, 64 hidden, 2 layers, 4 heads of 32 (head_dim != hidden /
//                    heads), 2 kv heads, q/k norms, 8 experts of ffn 32, top 2: unit tests
//   mixtral-8x7b     Mixtral 8x7B: vocab 32000, 4096 hidden, 32 layers, 32 heads, 8 kv heads,
//                    8 experts of ffn 14336, top 2, rope theta 1e6, seq 32768, untied
//                    (46,702,792,704; 12,879,925,248 active a token)
//   qwen3-30b-a3b    Qwen3-30B-A3B: vocab 151936, 2048 hidden, 48 layers, 32 heads of 128, 4 kv
//                    heads, q/k norms, 128 experts of ffn 768, top 8 (normalised), rope theta 1e6,
//                    seq 40960, untied (30,532,122,624; 3,353,032,704 active)
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace stratum::models {

struct ModelConfig {
  std::string name;            // the preset it came from (for logs)
  std::string arch = "gpt2";   // "gpt2" | "llama" | "mixtral" | "qwen3_moe"
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;     // GPT-2: rows of the position table; LLaMA: longest input accepted
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;        // == heads for GPT-2
  int64_t ffn_hidden = 0;      // MLP inner size (GPT-2: 4 x hidden)
  double norm_eps = 1e-5;      // LayerNorm / RMSNorm epsilon
  double rope_theta = 10000;   // LLaMA only
  // LLaMA 3.1+'s "llama3" RoPE frequency scaling; rope_scaling_factor 0: none.
  double rope_scaling_factor = 0;
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int64_t rope_original_max_seq_len = 8192;
  double init_std = 0.02;      // normal init; residual projections get init_std / sqrt(2 layers)
  bool tie_embeddings = true;  // LM head reuses the token embedding
  double dropout = 0.0;        // GPT-2: embedding, attention, residual; LLaMA: attention only
  // On the attention probabilities, when it differs (Hugging Face GPT-2's
  // attn_pdrop beside resid_pdrop); negative: as dropout.
  double attention_dropout = -1.0;
  double attention_dropout_p() const { return attention_dropout >= 0 ? attention_dropout : dropout; }
  // The MLP's activation output (GELU's, SwiGLU's: ffn elements a token and
  // layer) recomputed in backward rather than kept from forward
  // (nn::gelu_mlp, nn::swiglu_linear): on 2 H200s 3.0 GiB less on gpt2-1.3b
  // (micro 8) for 0.1-0.6% of throughput, 2.0 GiB less on llama-1b for ~1%.
  // A training setting, not the model's: the same values either way.
  bool recompute_mlp_activation = false;
  // Long sequences (DeepSpeed ALST's tiling), training settings too, the same
  // values either way. tiled_mlp_tokens: each dense MLP runs over tiles of
  // this many of the micro-batch's tokens, recomputed tile by tile in
  // backward (nn/tiled_rows.h): [tile, FFN] intermediates instead of
  // [B x T, FFN]. tiled_loss_tokens: the LM head and the loss run fused over
  // tiles of this many tokens (nn/tiled_lm_loss.h): [tile, vocab] logits
  // instead of [B x T, vocab]; not under tensor parallelism or in a
  // pipeline's last stage (their loss reads the logits). 0: off.
  int64_t tiled_mlp_tokens = 0;
  int64_t tiled_loss_tokens = 0;

  // LLaMA's family: an attention head's width when it is not hidden / heads
  // (Qwen3's 128 at hidden 2048 and 32 heads); 0: hidden / heads.
  int64_t explicit_head_dim = 0;
  // Qwen3: RMSNorm over each query and key head (q_norm, k_norm) before RoPE.
  bool qk_norm = false;

  // Mixture of experts ("mixtral", "qwen3_moe"): every block's MLP is a
  // router over num_experts SwiGLU experts of moe_ffn_hidden, top_k a token
  // (nn/moe/sparse_moe.h). Mixtral's experts are ffn_hidden wide.
  int64_t num_experts = 0;  // 0: a dense model
  int64_t top_k = 0;
  int64_t moe_ffn_hidden = 0;
  int64_t shared_expert_ffn_hidden = 0;  // shared experts every token goes through (0: none)
  std::string router_score = "softmax";  // "softmax" | "sigmoid"
  bool norm_topk_prob = true;            // the chosen experts' weights divided by their sum
  int64_t router_groups = 1, router_top_groups = 1;  // group-limited routing (DeepSeek-V3)
  double routed_scaling_factor = 1.0;
  // How the routing trains (the config's "moe" section; not the model's
  // shape: the same weights either way). capacity 0: dropless.
  double moe_capacity_factor = 0;
  std::string moe_drop_policy = "probs";         // "probs" | "position"
  std::string moe_load_balancing = "aux_loss";   // "aux_loss" | "seq_aux_loss" | "none"
  double moe_aux_loss_coeff = 1e-2;
  double moe_z_loss_coeff = 0;
  double moe_expert_bias_rate = 0;  // > 0: aux-loss-free balancing's per-expert bias, updated by this much a step

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : heads > 0 ? hidden / heads : 0; }
  bool is_moe() const { return num_experts > 0; }
  // LLaMA's blocks (RMSNorm, RoPE, grouped-query attention): llama, mixtral, qwen3_moe.
  bool llama_family() const { return arch == "llama" || arch == "mixtral" || arch == "qwen3_moe"; }
};

// Names of every preset, in the order above.
std::vector<std::string> preset_names();
// A preset by name; throws stratum::Error listing the known names (with a did-you-mean).
ModelConfig preset(const std::string& name);

// Sets one field from text ("layers", "hidden", "heads", "kv_heads", "ffn_hidden",
// "vocab_size", "max_seq_len", "rope_theta", "norm_eps", "init_std", "dropout", "attention_dropout",
// "tie_embeddings", "rope_scaling_factor", "rope_low_freq_factor",
// "rope_high_freq_factor", "rope_original_max_seq_len", "recompute_mlp_activation",
// "tiled_mlp_tokens", "tiled_loss_tokens",
// "head_dim", "qk_norm", "num_experts", "top_k", "moe_ffn_hidden",
// "shared_expert_ffn_hidden", "router_score", "norm_topk_prob", "router_groups",
// "router_top_groups", "routed_scaling_factor");
// throws stratum::Error naming the key and the value.
void apply_override(ModelConfig& config, const std::string& key, const std::string& value);
// The override keys apply_override accepts.
std::vector<std::string> override_keys();

// preset(name), then the overrides in order, then validate(). For GPT-2, a
// new `hidden` also sets ffn_hidden = 4 x hidden and a new `heads` sets
// kv_heads, unless those are overridden too.
ModelConfig make_model_config(const std::string& preset_name,
                              const std::vector<std::pair<std::string, std::string>>& overrides = {});
// Parses "key=value" (as given on a command line) into a pair; throws naming the text.
std::pair<std::string, std::string> parse_override(const std::string& key_equals_value);

// The largest shape validate() admits: each far above any published model's
// (Llama 3.1 405B: vocab 128256, hidden 16384, 126 layers, ffn 53248, 131072
// positions; Gemma: vocab 256000), so that a value beyond one is a file that
// is not a model's config rather than a model, refused before anything is
// allocated. With these, every product parameter_count forms fits int64.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;     // 4,194,304
inline constexpr int64_t kMaxHidden = int64_t{1} << 17;        // 131,072
inline constexpr int64_t kMaxLayers = int64_t{1} << 12;        // 4,096
inline constexpr int64_t kMaxFfnHidden = int64_t{1} << 20;     // 1,048,576
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;        // 16,777,216 positions
inline constexpr int64_t kMaxParameters = int64_t{1} << 41;    // 2.2 trillion
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;       // 65,536 (DeepSeek-V3: 256)
// heads: at most hidden (a head of at least one dimension); kv_heads: at most heads.

// Throws stratum::Error listing every problem (hidden % heads, heads % kv_heads,
// a dimension beyond its limit above, ...).
void validate(const ModelConfig& config);

// Trainable parameters, counted from the architecture (tied embeddings once).
// Saturates at INT64_MAX rather than overflowing (meaningful after validate()).
int64_t parameter_count(const ModelConfig& config);
// Those a token runs through: a mixture of experts counts top_k of its
// experts (and the shared ones); a dense model, all (parameter_count).
int64_t active_parameter_count(const ModelConfig& config);
// What one rank of a tensor-parallel group of `size` holds (its shards, the
// replicated rest, its rows of the padded vocabulary; models/tensor_parallel_plan.h).
int64_t tensor_parallel_param_count(const ModelConfig& config, int64_t size);
// One line: "gpt2-124m (gpt2): 12 layers, 768 hidden, 12 heads, ... 124,439,808 parameters".
std::string describe(const ModelConfig& config);

}  // namespace stratum::models
