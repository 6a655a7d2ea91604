#include "stratum/planning/memory_estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "stratum/core/error.h"
#include "stratum/nn/context_parallel/context_split.h"
#include "stratum/nn/tensor_parallel/vocab_padding.h"
#include "stratum/pipeline/simulate.h"

namespace stratum::planning {
namespace {

// Bytes of a gradient at stages 0-2 over `n` data-parallel ranks (ZeRO-3's shard: g3 below).
double gradient_bytes(const EstimateInput& in, double n) {
  const double w = static_cast<double>(in.param_bytes);
  return in.grad_bytes > 0 ? static_cast<double>(in.grad_bytes) : n > 1 ? std::max(w, 4.0) : w;
}

// FP8's weight copies (W and Wᵀ, a byte each) of `blocks` blocks a GPU holds;
// 0 without fp8. Measured GPU peaks were 2.0-2.5% above the estimate with
// them (MemoryEstimator.MatchesFp8PeaksMeasuredOnH100AndH200). The bytes the
// projections' FP8 inputs save on the activations (measured on the CPU:
// Fp8Layers.KeepTheirWeightCopiesAndTheirInputsAsFp8Bytes) are not
// subtracted: on the GPU FP8 held more, not less, than bf16 beside the copies.
double fp8_weight_copy_bytes(const EstimateInput& in, double blocks) {
  return in.fp8 ? 2.0 * blocks * static_cast<double>(in.block_projection_params) * in.fp8_share : 0.0;
}

// Every stage x offload choice for `psi` parameters over `n` data-parallel
// ranks, a GPU holding `blocks` transformer blocks (FP8's weight copies).
std::vector<StateEstimate> model_states(const EstimateInput& in, double psi, double n, double blocks) {
  const double w = static_cast<double>(in.param_bytes);  // bytes of a parameter as trained
  const double g = gradient_bytes(in, n);
  // fp32 master + Adam m + v: 12 bytes a parameter; with 16-bit training the master is a
  // separate copy, with fp32 training the parameters are the master (stage 0) or a copy of a shard.
  const double k = in.param_bytes == 4 ? 8.0 : 12.0;
  // ZeRO-3 holds one gathered layer and the prefetched next one, plus that layer's full gradient.
  const double working_set = 3.0 * w * static_cast<double>(in.largest_layer_params);
  const double per_node = static_cast<double>(in.gpus_per_node);
  // Offloaded optimizer: fp32 master + m + v on the host, and with 16-bit training the
  // 16-bit copy the host Adam writes (pinned, for the copy up; with offload_param it is
  // the parameter shard itself). The gradients stay on the GPU: the host Adam streams
  // them down in chunks (optim::HostAdam), as no fp32 gradient shard is held there.
  const double offloaded = (12.0 + (w < 4.0 ? w : 0.0)) * psi / n;
  // FP8: every block's copies kept at stages 0-2; at stage 3 the gathered layer's only.
  const double fp8_kept = fp8_weight_copy_bytes(in, blocks),
               fp8_layer = fp8_weight_copy_bytes(in, std::min(blocks, 1.0));
  std::vector<StateEstimate> out;
  auto add = [&](int stage, bool opt, bool param, double gpu, double cpu_per_gpu) {
    gpu += stage < 3 ? fp8_kept : fp8_layer;
    out.push_back(StateEstimate{stage, opt, param, gpu, cpu_per_gpu * per_node});
  };
  add(0, false, false, (w + g) * psi + k * psi, 0);
  const double k1 = 12.0;  // stages >= 1 keep a separate fp32 master shard (+ m + v), also in fp32 training
  add(1, false, false, (w + g) * psi + k1 * psi / n, 0);
  add(1, true, false, (w + g) * psi, offloaded);
  add(2, false, false, w * psi + (g + k1) * psi / n, 0);
  add(2, true, false, w * psi + g * psi / n, offloaded);
  const double g3 = in.grad_accum_fp32 ? 4.0 : w;  // ZeRO-3's gradient shard
  add(3, false, false, (w + g3 + k1) * psi / n + working_set, 0);
  add(3, true, false, (w + g3) * psi / n + working_set, offloaded);
  add(3, true, true, g3 * psi / n + working_set, offloaded);
  return out;
}

// Under ZB-H1, ZeRO 2 and 3 stage the window's gradients whole (in the wire's
// dtype) until it closes (zero::ZeroOptions::reduce_at_window_end): ZeRO-2
// keeps stage 1's gradient memory, ZeRO-3 adds it to its partitioned states.
void held_window_gradients(const EstimateInput& in, double psi, double n, std::vector<StateEstimate>& states) {
  const double g = gradient_bytes(in, n);
  for (StateEstimate& s : states) {
    if (s.stage == 2) s.gpu_bytes += g * psi - g * psi / n;
    if (s.stage == 3) s.gpu_bytes += g * psi;
  }
}

// The tokens of a sequence one GPU holds: its 1/context_parallel part.
double held_tokens(const EstimateInput& in) {
  return static_cast<double>(in.seq_len) / static_cast<double>(std::max<int64_t>(1, in.context_parallel));
}

// Attention's heads on one tensor-parallel rank: the query heads, the
// key/value heads (split, or the one a rank shares) and a head's width.
struct RankHeads {
  double heads = 0, kv = 0, head_dim = 0;
};
RankHeads rank_heads(const EstimateInput& in) {
  const int64_t t = std::max<int64_t>(1, in.tensor_parallel);
  const int64_t kv_heads = in.kv_heads > 0 ? in.kv_heads : in.heads;
  RankHeads r;
  if (in.heads <= 0) return r;
  r.heads = static_cast<double>(in.heads / t);
  r.kv = static_cast<double>(kv_heads % t == 0 ? kv_heads / t : 1);
  r.head_dim = static_cast<double>(in.hidden) / static_cast<double>(in.heads);
  return r;
}

bool mlp_tiled(const EstimateInput& in) { return in.tiled_mlp_tokens > 0 && in.experts == 0; }

// A tiled MLP's one tile in flight (ModelConfig::tiled_mlp_tokens): its
// pre-activation (gated: gate and up) and activation output, and in backward
// their gradients, for the tile's tokens on this rank's FFN columns.
double mlp_tile_bytes(const EstimateInput& in) {
  if (!mlp_tiled(in) || in.hidden <= 0) return 0.0;
  const double tokens = held_tokens(in) * static_cast<double>(in.micro_batch);
  const double tile = std::min(tokens, static_cast<double>(in.tiled_mlp_tokens));
  const double ffn = in.ffn > 0 ? static_cast<double>(in.ffn) : 4.0 * static_cast<double>(in.hidden);
  const double t = static_cast<double>(std::max<int64_t>(1, in.tensor_parallel));
  return 2.0 * static_cast<double>(in.param_bytes) * tile * (in.gated_mlp ? 3.0 : 2.0) * ffn / t;
}

// Activation bytes one block keeps for a micro-batch (no checkpointing), on
// one rank of a tensor-parallel group of t, for the tokens the rank holds
// (a context-parallel rank: its part of the sequence).
double block_activation_bytes(const EstimateInput& in) {
  const double s = held_tokens(in), b = static_cast<double>(in.micro_batch),
               h = static_cast<double>(in.hidden), w = static_cast<double>(in.param_bytes);
  const int64_t t = std::max<int64_t>(1, in.tensor_parallel);
  // Kept per token and layer (flash attention: no s x s scores; no dropout
  // masks): both norms' inputs and outputs (4h), q, k and v (h + 2 kv), the
  // attention output (h), and the MLP's pre-activation (ffn; gated: gate and
  // up, 2 ffn) and, unless recomputed in backward, the activation's output
  // (ffn). GPT-2 (ffn 4h) keeping it: 16h elements, Korthikanti et al.'s 34
  // sbh bytes less the 2 of dropout masks; recomputing it: 12h.
  // Under tensor parallelism the split regions keep 1/t of q, the attention
  // output and the MLP (key/value heads: 1/t of them, or the one a rank
  // shares); the norms keep the whole sequence, or under sequence parallelism
  // their 1/t slice (the column-parallel GEMMs gather their input again in
  // backward: nn::tp::through_region).
  const int64_t kv_heads = in.kv_heads > 0 ? in.kv_heads : in.heads;
  const double head_dim = in.heads > 0 ? h / static_cast<double>(in.heads) : h;
  const double kv = in.heads > 0 ? head_dim * static_cast<double>(kv_heads % t == 0 ? kv_heads / t : 1) : h / t;
  const double ffn = in.ffn > 0 ? static_cast<double>(in.ffn) : 4.0 * h;
  // A tiled MLP keeps nothing of its own (each tile recomputed in backward; mlp_tile_bytes).
  const double mlp = mlp_tiled(in) ? 0.0 : (in.gated_mlp ? 2.0 : 1.0) + (in.mlp_activation_recomputed ? 0.0 : 1.0);
  const double norms = in.sequence_parallel ? 4.0 * h / t : 4.0 * h;
  // A mixture of experts keeps, per assignment (top_k a token), its gathered
  // row (h), gate and up (2 F), the SwiGLU output (F) and the expert's output
  // (h); per token the combined output (h) and the router's fp32 scores and
  // probabilities (2 E floats). Replicated over tensor parallelism, but for
  // sequence parallelism, where each rank routes its 1/t slice of the tokens.
  const double moe = in.experts > 0
                         ? (static_cast<double>(in.top_k) * (2.0 * h + 3.0 * static_cast<double>(in.moe_ffn)) + h +
                            2.0 * static_cast<double>(in.experts) * 4.0 / static_cast<double>(in.param_bytes)) /
                               (in.sequence_parallel ? t : 1.0)
                         : 0.0;
  const double per_token = norms + h / t + 2.0 * kv + h / t + (in.experts > 0 ? moe : mlp * ffn / t);
  return w * s * b * per_token;
}

// Of `blocks` checkpointed blocks, those whose inputs cpu_checkpointing keeps
// on the host: all, or the first host_checkpoint_blocks.
double host_blocks_of(const EstimateInput& in, double blocks) {
  if (!in.activation_checkpointing || !in.cpu_checkpointing) return 0.0;
  return in.host_checkpoint_blocks ? std::min(blocks, static_cast<double>(*in.host_checkpoint_blocks)) : blocks;
}

// Per token on this rank: the incoming gradient, the residual's and the
// block's output, kept until its backward returns (3h; a 1/t slice under
// sequence parallelism); the attention output's gradient and the query, key
// and value gradients (2h + 2 kv, split as the activations); FlashAttention's
// fp32 accumulator of the query gradient (4 bytes a query element); with
// RoPE (LLaMA) the gradients of the unrotated query and key (h + kv); under
// cpu_checkpointing the next block's input, brought back ahead (h). For
// llama-1b that is 65 KiB a token with the saved activations, against the
// 63.5 its backward measured at 256K and 512K on an H100 (docs/long_context.md).
double block_backward_bytes(const EstimateInput& in) {
  if (in.hidden <= 0) return 0.0;
  const double s = held_tokens(in), b = static_cast<double>(in.micro_batch), h = static_cast<double>(in.hidden),
               w = static_cast<double>(in.param_bytes), t = static_cast<double>(std::max<int64_t>(1, in.tensor_parallel));
  const RankHeads r = rank_heads(in);
  const double q = in.heads > 0 ? r.heads * r.head_dim : h / t, kv = in.heads > 0 ? r.kv * r.head_dim : h / t;
  const double whole = (3.0 + (host_blocks_of(in, static_cast<double>(in.layers)) > 0 ? 1.0 : 0.0)) * h /
                       (in.sequence_parallel ? t : 1.0);
  const double split = 2.0 * q + 2.0 * kv + q * 4.0 / w + (in.gated_mlp ? q + kv : 0.0);
  return w * s * b * (whole + split);
}

// Bytes a logit holds at the loss: the logits and their gradient in the
// training dtype (the LM head reads the gradient in place, in the logits'
// padded rows), unless measured otherwise.
double loss_bytes_per_logit(const EstimateInput& in) {
  return in.loss_bytes_per_logit > 0 ? in.loss_bytes_per_logit : 2.0 * static_cast<double>(in.param_bytes);
}

// The LM head's logits (this rank's padded vocabulary columns) and what the
// loss keeps for `tokens`: untiled, each logit at loss_bytes_per_logit until
// the backward; tiled (ModelConfig::tiled_loss_tokens), a float a token (its
// log-sum-exp) and, at the head's peak, one tile's logits (tiled_loss_peak).
double loss_bytes(const EstimateInput& in, double tokens) {
  if (in.vocab <= 0) return 0.0;
  const double vocab = static_cast<double>(nn::tp::vocab_rows_per_rank(in.vocab, in.tensor_parallel));
  if (in.tiled_loss_tokens <= 0) return tokens * vocab * loss_bytes_per_logit(in);
  return 4.0 * tokens;
}

// A tiled loss's peak beside what it keeps (nn/tiled_lm_loss.cpp): forward, a
// tile's 16-bit logits, their fp32 copy and log-sum-exp's fp32 temporary;
// backward, a tile's fp32 softmax and its 16-bit gradient beside the head
// weight's fp32 gradient sum. 0 untiled.
double tiled_loss_peak(const EstimateInput& in, double tokens) {
  if (in.vocab <= 0 || in.tiled_loss_tokens <= 0) return 0.0;
  const double vocab = static_cast<double>(nn::tp::vocab_rows_per_rank(in.vocab, in.tensor_parallel));
  const double tile = std::min(tokens, static_cast<double>(in.tiled_loss_tokens)), w = static_cast<double>(in.param_bytes);
  return std::max(tile * vocab * (w + 8.0), tile * vocab * (w + 4.0) + vocab * static_cast<double>(in.hidden) * 4.0);
}

// Bytes of the checkpointed blocks' inputs (each block's input; a 1/t slice
// under sequence parallelism) for `blocks` blocks.
double checkpoint_bytes(const EstimateInput& in, double blocks) {
  const double t = static_cast<double>(std::max<int64_t>(1, in.tensor_parallel));
  return blocks * static_cast<double>(in.param_bytes) * held_tokens(in) * static_cast<double>(in.micro_batch) *
         static_cast<double>(in.hidden) / (in.sequence_parallel ? t : 1.0);
}

}  // namespace

double all_to_all_bytes(const EstimateInput& in) {
  const int64_t ep = std::max<int64_t>(1, in.expert_parallel);
  if (ep == 1 || in.experts == 0) return 0.0;
  // A tensor-parallel GPU sends the tokens it routes: all it holds (its
  // 1/cp part of each sequence), or its 1/t slice of them under sequence parallelism.
  const int64_t t = in.sequence_parallel ? std::max<int64_t>(1, in.tensor_parallel) : 1;
  const double rows =
      static_cast<double>(in.micro_batch * in.top_k) * held_tokens(in) / static_cast<double>(t);
  const double off_rank = static_cast<double>(ep - 1) / static_cast<double>(ep);
  return 4.0 * static_cast<double>(in.layers) * rows * static_cast<double>(in.hidden) *
         static_cast<double>(in.param_bytes) * off_rank;
}

const char* context_method_name(ContextMethod m) {
  switch (m) {
    case ContextMethod::ulysses: return "ulysses";
    case ContextMethod::hybrid: return "hybrid";
    default: return "ring";
  }
}

ContextMethod parse_context_method(const std::string& name) {
  if (name == "ring") return ContextMethod::ring;
  if (name == "ulysses") return ContextMethod::ulysses;
  if (name == "hybrid") return ContextMethod::hybrid;
  throw Error("unknown context-parallel method '" + name + "'; known: ulysses, ring, hybrid");
}

ContextMethod context_method_of(int64_t cp, int64_t ulysses) {
  if (cp > 1 && ulysses == cp) return ContextMethod::ulysses;
  return ulysses > 1 ? ContextMethod::hybrid : ContextMethod::ring;
}

ContextTraffic context_parallel_layer_bytes(const EstimateInput& in) {
  ContextTraffic out;
  const int64_t cp = std::max<int64_t>(1, in.context_parallel), u = std::max<int64_t>(1, in.context_ulysses);
  if (cp == 1 || in.heads <= 0 || in.hidden <= 0) return out;
  const RankHeads r = rank_heads(in);
  const double row = static_cast<double>(in.micro_batch) * held_tokens(in) * r.head_dim;  // elements a head
  const double w = static_cast<double>(in.param_bytes);
  const double off_rank = static_cast<double>(u - 1) / static_cast<double>(u);
  out.ulysses_forward = off_rank * row * (r.heads + 2.0 * r.kv) * w + off_rank * row * r.heads * w;
  out.ulysses_backward = out.ulysses_forward;
  const int64_t ring = cp / u;
  const double kv_block = row * 2.0 * r.kv;
  out.ring_hops = ring - 1;
  out.ring_forward = static_cast<double>(ring - 1) * kv_block * w;
  out.ring_backward = ring > 1 ? static_cast<double>(ring - 1) * kv_block * w + static_cast<double>(ring) * kv_block * 4.0 : 0.0;
  return out;
}

double context_parallel_bytes(const EstimateInput& in) {
  const ContextTraffic t = context_parallel_layer_bytes(in);
  return static_cast<double>(in.layers) * (t.forward() + t.backward());
}

double context_parallel_buffer_bytes(const EstimateInput& in) {
  const int64_t cp = std::max<int64_t>(1, in.context_parallel), u = std::max<int64_t>(1, in.context_ulysses);
  if (cp == 1 || in.heads <= 0 || in.hidden <= 0) return 0.0;
  const RankHeads r = rank_heads(in);
  const double row = static_cast<double>(in.micro_batch) * held_tokens(in) * r.head_dim;
  const double w = static_cast<double>(in.param_bytes);
  const double ulysses = u > 1 ? 2.0 * row * (r.heads + 2.0 * r.kv) * w : 0.0;
  const double ring = cp / u > 1 ? 2.0 * row * 2.0 * r.kv * (w + 4.0) : 0.0;
  return std::max(ulysses, ring);
}

std::string context_parallel_problem(const EstimateInput& in) {
  const int64_t cp = in.context_parallel, u = in.context_ulysses, t = std::max<int64_t>(1, in.tensor_parallel);
  auto n = [](int64_t v) { return std::to_string(v); };
  if (cp < 1) return "context-parallel size " + n(cp) + " is not a size (1 or more)";
  if (cp == 1) return "";
  if (u < 1 || cp % u != 0)
    return "Ulysses over " + n(u) + " GPUs does not divide the context-parallel group of " + n(cp);
  const std::string split = nn::cp::split_problem(in.seq_len, nn::cp::ContextSplit{cp, u});
  if (!split.empty()) return split;
  if (in.sequence_parallel && (in.seq_len / cp) % t != 0)
    return "each GPU's " + n(in.seq_len / cp) + " tokens (seq " + n(in.seq_len) + " / cp " + n(cp) +
           ") do not split over the " + n(t) + " tensor-parallel GPUs of sequence parallelism";
  if (u > 1 && in.heads > 0) {
    const int64_t kv_heads = in.kv_heads > 0 ? in.kv_heads : in.heads;
    const int64_t heads = in.heads / t, kv = kv_heads % t == 0 ? kv_heads / t : 1;
    if (heads % u != 0 || kv % u != 0)
      return "Ulysses over " + n(u) + " GPUs splits the heads, but the model has " + n(in.heads) + " query and " +
             n(kv_heads) + " key/value heads" +
             (t > 1 ? " (" + n(heads) + " and " + n(kv) + " per tensor-parallel GPU of " + n(t) + ")" : std::string()) +
             "; use a Ulysses size that divides both, or the ring (any heads)";
  }
  return "";
}

double expert_parallel_params(const EstimateInput& in) {
  const int64_t t = std::max<int64_t>(1, in.tensor_parallel), ep = std::max<int64_t>(1, in.expert_parallel);
  const int64_t rest = (t > 1 && in.tp_params > 0 ? in.tp_params : in.params) - in.expert_params;
  return static_cast<double>(rest) + static_cast<double>(in.expert_params) / static_cast<double>(ep);
}

std::vector<StateEstimate> estimate_model_states(const EstimateInput& in) {
  const int64_t ep = std::max<int64_t>(1, in.expert_parallel);
  const int64_t t = std::max<int64_t>(1, in.tensor_parallel);
  const double blocks = static_cast<double>(std::max<int64_t>(0, in.layers));
  if (ep > 1) {
    // The experts split over ep GPUs and replicated over tensor parallelism,
    // whose GPUs split the rest; everything partitioned over the GPUs holding
    // the same experts and tensor-parallel shard.
    const double held = expert_parallel_params(in);
    EstimateInput shard = in;
    const int64_t block_experts = in.layers > 0 ? in.expert_params / in.layers : 0;
    shard.largest_layer_params = (in.largest_layer_params - block_experts) / t + block_experts / ep;
    return model_states(shard, held, static_cast<double>(in.nodes * in.gpus_per_node / (ep * t)), blocks);
  }
  if (t == 1)
    return model_states(in, static_cast<double>(in.params), static_cast<double>(in.nodes * in.gpus_per_node), blocks);
  EstimateInput shard = in;
  shard.largest_layer_params = in.largest_layer_params / t;
  return model_states(shard, static_cast<double>(in.tp_params > 0 ? in.tp_params : in.params / t),
                      static_cast<double>(in.nodes * in.gpus_per_node / t), blocks);
}

namespace {

// One block's projection weights on one of `t` tensor-parallel ranks (FP8's
// casts): GPT-2's c_attn, attn.c_proj, c_fc, mlp.c_proj; LLaMA's q, k, v, o
// (key/value heads fewer than the ranks: one head a rank) and, dense, gate,
// up, down. A mixture of experts' experts are not FP8 projections.
int64_t projection_params_per_block(const models::ModelConfig& c, int64_t t) {
  const int64_t C = c.hidden, F = c.ffn_hidden;
  if (c.arch == "gpt2") return (4 * C * C + 2 * C * F) / t;
  const int64_t q = C * c.heads * c.head_dim() / t;
  const int64_t kv_heads = c.kv_heads > 0 ? c.kv_heads : c.heads;
  const int64_t kv = C * (kv_heads % t == 0 ? kv_heads / t : 1) * c.head_dim();
  return 2 * q + 2 * kv + (c.is_moe() ? 0 : 3 * C * F / t);
}

}  // namespace

void set_model_shape(EstimateInput& in, const models::ModelConfig& c) {
  in.params = models::parameter_count(c);
  in.layers = c.layers;
  in.hidden = c.hidden;
  in.heads = c.heads;
  in.kv_heads = c.kv_heads;
  in.ffn = c.ffn_hidden;
  in.gated_mlp = c.llama_family();
  in.mlp_activation_recomputed = c.recompute_mlp_activation;
  in.tiled_mlp_tokens = c.tiled_mlp_tokens;
  in.tiled_loss_tokens = c.tiled_loss_tokens;
  in.vocab = c.vocab_size;
  if (c.is_moe()) {
    in.experts = c.num_experts;
    in.top_k = c.top_k;
    in.moe_ffn = c.moe_ffn_hidden;
    in.expert_params = c.layers * c.num_experts * 3 * c.hidden * c.moe_ffn_hidden;
  }
  models::ModelConfig block = c;
  block.layers = 1;
  const int64_t one_block =
      models::parameter_count(block) - c.vocab_size * c.hidden * (c.tie_embeddings ? 1 : 2);
  in.largest_layer_params = std::max<int64_t>(one_block, c.vocab_size * c.hidden);
  // The CausalLM's layer stack, as the pipeline engine weighs it: the parameters
  // each layer owns (a tied head owns none; it borrows the token embedding).
  const int64_t embedding = c.vocab_size * c.hidden + (c.arch == "gpt2" ? c.max_seq_len * c.hidden : 0);
  const int64_t head = c.tie_embeddings ? 0 : c.vocab_size * c.hidden;
  models::ModelConfig no_blocks = c;
  no_blocks.layers = 0;
  const int64_t final_norm = models::parameter_count(no_blocks) - embedding - head;
  const int64_t block_params = c.layers > 0 ? (in.params - models::parameter_count(no_blocks)) / c.layers : 0;
  const std::string arch = c.llama_family() ? "Llama" : "GPT2";
  in.layer_weights = {{arch + "Embedding", embedding}};
  for (int64_t i = 0; i < c.layers; ++i)
    in.layer_weights.push_back({arch == "GPT2" ? "GPT2Block" : "LlamaDecoderLayer", block_params});
  in.layer_weights.push_back({arch + "FinalNorm", final_norm});
  in.layer_weights.push_back({"LMHead", head});
  in.tied_embedding_params = c.tie_embeddings ? c.vocab_size * c.hidden : 0;
  in.tp_params = models::tensor_parallel_param_count(c, in.tensor_parallel);
  const int64_t t = std::max<int64_t>(1, in.tensor_parallel);
  in.block_projection_params = projection_params_per_block(c, t);
  if (t > 1) {  // each stage's layers as one tensor-parallel rank holds them (what the engine cuts)
    const int64_t rows = nn::tp::vocab_rows_per_rank(c.vocab_size, t);
    models::ModelConfig one = c, none = c;
    one.layers = 1;
    none.layers = 0;
    const int64_t block_rank =
        models::tensor_parallel_param_count(one, t) - models::tensor_parallel_param_count(none, t);
    in.layer_weights.front().parameters = rows * c.hidden + (c.arch == "gpt2" ? c.max_seq_len * c.hidden : 0);
    for (int64_t i = 1; i <= c.layers; ++i) in.layer_weights[static_cast<size_t>(i)].parameters = block_rank;
    in.layer_weights.back().parameters = c.tie_embeddings ? 0 : rows * c.hidden;
    in.tied_embedding_params = c.tie_embeddings ? rows * c.hidden : 0;
  }
}

double estimate_activation_bytes(const EstimateInput& in) {
  if (in.layers <= 0 || in.hidden <= 0) return 0.0;
  const double L = static_cast<double>(in.layers), tokens = held_tokens(in) * static_cast<double>(in.micro_batch);
  const double per_layer = block_activation_bytes(in);
  // Checkpointed: each block's input (on the host under cpu_checkpointing,
  // those of its first blocks with a split), and in backward one recomputed
  // block at a time.
  const double kept = in.activation_checkpointing ? checkpoint_bytes(in, L - host_blocks_of(in, L)) : L * per_layer;
  const double recomputed =
      (in.activation_checkpointing ? per_layer : 0.0) + block_backward_bytes(in) + mlp_tile_bytes(in);
  // Untiled, the logits live from the head's forward through the backward of
  // the last block: counted beside a recomputed block. Tiled, the head's
  // tiles and a recomputed block come one after the other.
  const double loss = loss_bytes(in, tokens);
  if (in.tiled_loss_tokens <= 0 || in.vocab <= 0) return kept + recomputed + loss;
  return kept + loss + std::max(recomputed, tiled_loss_peak(in, tokens));
}

double estimate_block_backward_bytes(const EstimateInput& in) {
  return in.layers > 0 ? block_backward_bytes(in) : 0.0;
}

double estimate_host_checkpoint_bytes(const EstimateInput& in) {
  if (in.layers <= 0 || in.hidden <= 0) return 0.0;
  return checkpoint_bytes(in, host_blocks_of(in, static_cast<double>(in.layers)));
}

namespace {

// "  context parallel 4 (ring): ..." for the tables; "" without it.
std::string context_line(const EstimateInput& in) {
  const int64_t cp = in.context_parallel;
  if (cp <= 1) return "";
  auto gib = [](double bytes) { return bytes / double(1ull << 30); };
  const ContextMethod m = context_method_of(cp, in.context_ulysses);
  const std::string method =
      m == ContextMethod::hybrid ? "hybrid, Ulysses over " + std::to_string(in.context_ulysses) : context_method_name(m);
  const ContextTraffic t = context_parallel_layer_bytes(in);
  const double L = static_cast<double>(in.layers);
  // Under expert parallelism ZeRO's group is the one its line names.
  const bool experts_split = in.experts > 0 && in.expert_parallel > 1;
  char line[512];
  std::snprintf(line, sizeof line,
                "  context parallel %lld (%s): a GPU keeps %lld of the %lld tokens' activations%s; a micro-batch a "
                "GPU sends %.3g GiB forward (Ulysses %.3g, ring %.3g over %lld hops) and %.3g GiB backward, exchange "
                "buffers %.3g GiB\n",
                (long long)cp, method.c_str(), (long long)(in.seq_len / cp), (long long)in.seq_len,
                experts_split ? "" : ", ZeRO over every data-parallel GPU",
                gib(L * t.forward()), gib(L * t.ulysses_forward), gib(L * t.ring_forward), (long long)t.ring_hops,
                gib(L * t.backward()), gib(context_parallel_buffer_bytes(in)));
  return line;
}

}  // namespace

std::string format_estimate(const EstimateInput& in) {
  char line[256];
  auto gib = [](double bytes) { return bytes / double(1ull << 30); };
  std::string out;
  std::snprintf(line, sizeof line,
                "Estimated memory for %.3gB parameters (largest layer %.3gM) on %lld node(s) x %lld GPU(s), %s training\n",
                in.params / 1e9, in.largest_layer_params / 1e6, (long long)in.nodes, (long long)in.gpus_per_node,
                in.param_bytes == 2 ? "16-bit" : "fp32");
  out += line;
  if (in.expert_parallel > 1) {
    const int64_t ep = in.expert_parallel, t = std::max<int64_t>(1, in.tensor_parallel);
    std::snprintf(line, sizeof line,
                  "  expert parallel %lld: %.3gB parameters a GPU (1/%lld of the %.3gB in experts), ZeRO over %lld "
                  "data-parallel ranks; all-to-all %.3g GiB a micro-batch a GPU (micro-batch %lld, %lld tokens of a "
                  "sequence)\n",
                  (long long)ep, expert_parallel_params(in) / 1e9,
                  (long long)ep, in.expert_params / 1e9, (long long)(in.nodes * in.gpus_per_node / (ep * t)),
                  gib(all_to_all_bytes(in)), (long long)in.micro_batch, (long long)held_tokens(in));
    out += line;
  }
  if (in.tensor_parallel > 1 && in.expert_parallel > 1) {
    std::snprintf(line, sizeof line, "  tensor parallel %lld%s: the rest split, the experts replicated over it\n",
                  (long long)in.tensor_parallel, in.sequence_parallel ? " with sequence parallelism" : "");
    out += line;
  } else if (in.tensor_parallel > 1) {
    std::snprintf(line, sizeof line,
                  "  tensor parallel %lld%s: %.3gB parameters a GPU, ZeRO over %lld data-parallel ranks\n",
                  (long long)in.tensor_parallel, in.sequence_parallel ? " with sequence parallelism" : "",
                  in.tp_params / 1e9, (long long)(in.nodes * in.gpus_per_node / in.tensor_parallel));
    out += line;
  }
  out += context_line(in);
  if (in.fp8) {
    std::snprintf(line, sizeof line,
                  "  fp8: the projections' weights cast, W and its transpose: %.2f GiB a GPU at ZeRO 0-2, %.2f at "
                  "ZeRO-3 (the layer in use), in the rows below\n",
                  gib(fp8_weight_copy_bytes(in, static_cast<double>(std::max<int64_t>(0, in.layers)))),
                  gib(fp8_weight_copy_bytes(in, 1.0)));
    out += line;
  }
  out += "  ZeRO  offload_optimizer  offload_param   per GPU (GiB)   per node CPU (GiB)\n";
  for (const auto& e : estimate_model_states(in)) {
    std::snprintf(line, sizeof line, "  %4d  %-17s  %-13s   %13.2f   %18.2f\n", e.stage, e.offload_optimizer ? "cpu" : "none",
                  e.offload_param ? "cpu" : "none", gib(e.gpu_bytes), gib(e.cpu_bytes_per_node));
    out += line;
  }
  const double act = estimate_activation_bytes(in);
  if (act > 0) {
    std::string how = in.activation_checkpointing ? "activation checkpointing" : "no checkpointing";
    if (in.mlp_activation_recomputed) how += ", MLP activation recomputed";
    if (mlp_tiled(in)) how += ", MLP tiled by " + std::to_string(in.tiled_mlp_tokens);
    if (in.tiled_loss_tokens > 0 && in.vocab > 0) how += ", loss tiled by " + std::to_string(in.tiled_loss_tokens);
    std::snprintf(line, sizeof line, "  activations: %.2f GiB per GPU (micro-batch %lld, seq %lld%s, %s)\n", gib(act),
                  (long long)in.micro_batch, (long long)in.seq_len,
                  in.context_parallel > 1 ? (" / cp " + std::to_string(in.context_parallel)).c_str() : "",
                  how.c_str());
    out += line;
    if (const double host = estimate_host_checkpoint_bytes(in); host > 0) {
      std::snprintf(line, sizeof line,
                    "  checkpointed block inputs in host memory (cpu_checkpointing, %lld of %lld blocks): %.2f GiB "
                    "per GPU, %.2f GiB per node beside the offloaded states\n",
                    (long long)host_blocks_of(in, static_cast<double>(in.layers)), (long long)in.layers, gib(host),
                    gib(host * static_cast<double>(in.gpus_per_node)));
      out += line;
    }
  }
  return out;
}

namespace {

// The row of `in`'s estimate for a stage and offload choice; throws Error if none.
StateEstimate state_row(const EstimateInput& in, int stage, bool offload_optimizer, bool offload_param) {
  for (const StateEstimate& e : estimate_model_states(in))
    if (e.stage == stage && e.offload_optimizer == offload_optimizer && e.offload_param == offload_param) return e;
  throw Error("no ZeRO-" + std::to_string(stage) + " row with offload_optimizer " +
              (offload_optimizer ? "cpu" : "none") + ", offload_param " + (offload_param ? "cpu" : "none"));
}

struct Footprint {
  double gpu = 0, host = 0;  // per GPU; per node
};
Footprint footprint(const EstimateInput& in, const StateEstimate& row) {
  return {row.gpu_bytes + estimate_activation_bytes(in) + context_parallel_buffer_bytes(in),
          row.cpu_bytes_per_node + estimate_host_checkpoint_bytes(in) * static_cast<double>(in.gpus_per_node)};
}

}  // namespace

int64_t longest_sequence(EstimateInput in, int stage, bool offload_optimizer, bool offload_param, double gpu_limit,
                         double host_limit, int64_t* host_blocks) {
  const int64_t step = 1024 * std::max<int64_t>(1, in.context_parallel), cap = int64_t{1} << 24;
  const StateEstimate row = state_row(in, stage, offload_optimizer, offload_param);  // the states do not depend on it
  // The split to try: the one given, or (cpu_checkpointing with none given) every one.
  const bool choose_split = in.activation_checkpointing && in.cpu_checkpointing && !in.host_checkpoint_blocks;
  const std::optional<int64_t> given = in.host_checkpoint_blocks;
  auto fits_with = [&](int64_t seq, std::optional<int64_t> blocks) {
    in.seq_len = seq;
    in.host_checkpoint_blocks = blocks;
    const Footprint f = footprint(in, row);
    return f.gpu <= gpu_limit && (host_limit <= 0 || f.host <= host_limit);
  };
  // The GPU's need falls and the host's grows with the blocks on the host:
  // the first split that fits both is the fewest blocks on the host.
  auto split_for = [&](int64_t seq) -> std::optional<int64_t> {
    if (!choose_split) return fits_with(seq, given) ? std::optional<int64_t>(given.value_or(in.layers)) : std::nullopt;
    for (int64_t n = 0; n <= in.layers; ++n)
      if (fits_with(seq, n)) return n;
    return std::nullopt;
  };
  auto fits = [&](int64_t seq) { return split_for(seq).has_value(); };
  int64_t lo = 0, hi = cap / step;  // in steps: lo fits (0: nothing), hi + 1 does not
  if (!fits(hi * step)) {
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid * step) ? lo : hi) = mid;
    }
    hi = lo;
  }
  if (host_blocks) *host_blocks = hi > 0 ? split_for(hi * step).value_or(in.layers) : in.layers;
  return hi * step;
}

std::string format_longest(const EstimateInput& in, double gpu_limit, double host_limit) {
  auto gib = [](double bytes) { return bytes / double(1ull << 30); };
  char line[320], host[96] = "";
  if (host_limit > 0) std::snprintf(host, sizeof host, " and %.1f GiB of host memory a node", gib(host_limit));
  const std::string cp = in.context_parallel > 1 ? ", cp " + std::to_string(in.context_parallel) : "";
  std::snprintf(line, sizeof line, "Longest sequence for %.3gB parameters (micro-batch %lld%s, %s) within %.1f GiB a GPU%s\n",
                in.params / 1e9, (long long)in.micro_batch, cp.c_str(),
                in.activation_checkpointing ? (in.cpu_checkpointing ? "checkpoints on the host" : "checkpointing")
                                            : "no checkpointing",
                gib(gpu_limit), host);
  std::string out = line;
  // Under cpu_checkpointing, the blocks whose inputs go to the host (chosen when not given).
  const bool host_column = in.activation_checkpointing && in.cpu_checkpointing;
  out += "  ZeRO  offload_optimizer  offload_param    longest seq   per GPU (GiB)   per node CPU (GiB)";
  out += host_column ? "   blocks on host\n" : "\n";
  for (const StateEstimate& e : estimate_model_states(in)) {
    EstimateInput at = in;
    int64_t host_blocks = in.layers;
    at.seq_len = longest_sequence(in, e.stage, e.offload_optimizer, e.offload_param, gpu_limit, host_limit, &host_blocks);
    if (host_column) at.host_checkpoint_blocks = host_blocks;
    const Footprint f = footprint(at, e);
    if (at.seq_len == 0)
      std::snprintf(line, sizeof line, "  %4d  %-17s  %-13s   %12s\n", e.stage, e.offload_optimizer ? "cpu" : "none",
                    e.offload_param ? "cpu" : "none", "none fits");
    else if (host_column)
      std::snprintf(line, sizeof line, "  %4d  %-17s  %-13s   %12lld   %13.2f   %18.2f   %8lld of %lld\n", e.stage,
                    e.offload_optimizer ? "cpu" : "none", e.offload_param ? "cpu" : "none", (long long)at.seq_len,
                    gib(f.gpu), gib(f.host), (long long)host_blocks, (long long)in.layers);
    else
      std::snprintf(line, sizeof line, "  %4d  %-17s  %-13s   %12lld   %13.2f   %18.2f\n", e.stage,
                    e.offload_optimizer ? "cpu" : "none", e.offload_param ? "cpu" : "none", (long long)at.seq_len,
                    gib(f.gpu), gib(f.host));
    out += line;
  }
  if (host_column && !in.host_checkpoint_blocks)
    out += "  blocks on host: activation_checkpointing.cpu_checkpointing_layers, the fewest that leave the GPU room\n";
  return out;
}

namespace {

// "embedding, blocks 0-4" for layers [begin, end) of the stack: layer 0 the
// embedding, 1..L the blocks, then the final norm and the head.
std::string describe_layers(size_t begin, size_t end, int64_t blocks) {
  std::vector<std::string> parts;
  if (begin == 0) parts.push_back("embedding");
  const int64_t first = std::max<int64_t>(static_cast<int64_t>(begin), 1) - 1,
                last = std::min<int64_t>(static_cast<int64_t>(end), blocks + 1) - 2;
  if (first == last) parts.push_back("block " + std::to_string(first));
  if (first < last) parts.push_back("blocks " + std::to_string(first) + "-" + std::to_string(last));
  if (begin <= size_t(blocks + 1) && end > size_t(blocks + 1)) parts.push_back("norm");
  if (end > size_t(blocks + 2)) parts.push_back("head");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

std::vector<StageEstimate> estimate_pipeline_stages(const EstimateInput& in) {
  const int64_t gpus = in.nodes * in.gpus_per_node, p = in.pipeline_stages, v = in.virtual_stages;
  const int64_t t = std::max<int64_t>(1, in.tensor_parallel);
  if (p >= 1 && gpus % p == 0 && gpus % (p * t) != 0)
    throw Error(std::to_string(p) + " pipeline stages x tensor-parallel " + std::to_string(t) + " do not divide the " +
                std::to_string(gpus) + " GPUs");
  if (p < 1 || gpus % p != 0)
    throw Error(std::to_string(p) + " pipeline stages do not divide the " + std::to_string(gpus) + " GPUs (" +
                std::to_string(in.nodes) + " node(s) x " + std::to_string(in.gpus_per_node) + "); use a divisor of " +
                std::to_string(gpus));
  if (in.layer_weights.empty() || in.layers <= 0)
    throw Error("a pipeline needs the model's layers to split: give a model shape (a preset)");
  const int64_t parts = p * v, layer_count = static_cast<int64_t>(in.layer_weights.size());
  if (parts > layer_count)
    throw Error(std::to_string(p) + " pipeline stages" +
                (v > 1 ? " x " + std::to_string(v) + " virtual stages = " + std::to_string(parts) + " parts" : "") +
                ", but the model has " + std::to_string(layer_count) + " layers to split (the embedding, " +
                std::to_string(in.layers) + " blocks, the final norm, the LM head); use at most " +
                std::to_string(layer_count) + (v > 1 ? " parts" : " stages"));
  const pipeline::Schedule schedule = pipeline::make_schedule(in.schedule, static_cast<int>(p),
                                                              static_cast<int>(in.micro_batches), static_cast<int>(v));
  const pipeline::Partition cut = pipeline::partition_layers(in.layer_weights, static_cast<int>(parts), "parameters");
  const pipeline::Simulation sim = pipeline::simulate(schedule);

  const double s = held_tokens(in), b = static_cast<double>(in.micro_batch), w = static_cast<double>(in.param_bytes);
  // A tiled MLP's tile in flight rides on the block being run.
  const double block = block_activation_bytes(in) + mlp_tile_bytes(in);
  // Checkpointing keeps each block's input (on the host under
  // cpu_checkpointing, those of a chunk's first blocks with a split) and
  // recomputes one block at a time in backward.
  const double kept_per_block = in.activation_checkpointing ? checkpoint_bytes(in, 1.0) : block;
  // The last virtual stage keeps its logits (a rank's padded columns under TP)
  // from forward to its backward, which adds their gradient; a tiled loss
  // keeps a float a token and holds one tile's logits in backward.
  const double vocab = static_cast<double>(nn::tp::vocab_rows_per_rank(in.vocab, t));
  const double logits = s * b * vocab;
  const double logits_kept = in.tiled_loss_tokens > 0 ? 4.0 * s * b : w * logits,
               loss_extra = in.tiled_loss_tokens > 0 ? tiled_loss_peak(in, s * b) : loss_bytes(in, s * b) - logits_kept;
  auto blocks_in = [&](int64_t part) {
    const int64_t first = std::max<int64_t>(static_cast<int64_t>(cut.begin(part)), 1),
                  end = std::min<int64_t>(static_cast<int64_t>(cut.end(part)), in.layers + 1);
    return std::max<int64_t>(end - first, 0);
  };

  // ZeRO's group: the stage's GPUs holding the same experts (all of them without expert parallelism).
  const int64_t ep = in.experts > 0 ? std::max<int64_t>(1, in.expert_parallel) : 1;
  const double dp = static_cast<double>(gpus / (p * t * ep));
  const int64_t block_experts = in.layers > 0 ? in.expert_params / in.layers : 0;
  std::vector<StageEstimate> out;
  for (int r = 0; r < p; ++r) {
    StageEstimate e;
    e.stage = r;
    bool has_embedding = false, has_head = false;
    for (int chunk = 0; chunk < v; ++chunk) {
      const int part = chunk * static_cast<int>(p) + r;
      for (size_t l = cut.begin(part); l < cut.end(part); ++l) e.params += in.layer_weights[l].parameters;
      e.blocks += blocks_in(part);
      has_embedding = has_embedding || cut.begin(part) == 0;
      has_head = has_head || part == parts - 1;
      e.layers += (chunk ? " | " : "") + describe_layers(cut.begin(part), cut.end(part), in.layers);
    }
    if (has_head && !has_embedding) e.params += in.tied_embedding_params;
    // The layer weights count a block's experts whole (tensor parallelism replicates them).
    e.expert_params = e.blocks * block_experts / ep;
    e.params -= e.blocks * block_experts - e.expert_params;
    e.in_flight = sim.peak_activations[r];
    // A stage's runner puts the first host_checkpoint_blocks of its blocks
    // (its chunks in order) on the host: what each chunk keeps on the GPU.
    std::vector<double> chunk_kept(static_cast<size_t>(v));
    double host_left = host_blocks_of(in, static_cast<double>(e.blocks));
    for (int chunk = 0; chunk < v; ++chunk) {
      const double n = static_cast<double>(blocks_in(chunk * p + r)), host = std::min(n, host_left);
      host_left -= host;
      chunk_kept[static_cast<size_t>(chunk)] = (n - host) * kept_per_block;
    }
    // Walk the rank's computes in order: a forward keeps its chunk's activations
    // until the end of its backward (for a split one, the W: it reads them);
    // the logits only until the backward of the input gradient.
    double held = 0;
    for (const auto& slot : sim.timeline[r]) {
      const pipeline::Action& a = slot.action;
      const int64_t part = a.chunk * p + r;
      const double chunk_bytes = chunk_kept[static_cast<size_t>(a.chunk)];
      const double chunk_logits = part == parts - 1 ? logits_kept : 0.0;
      if (a.op == pipeline::Op::forward) {
        held += chunk_bytes + chunk_logits;
        e.activation_bytes = std::max(e.activation_bytes, held);
      } else if (a.op == pipeline::Op::backward || a.op == pipeline::Op::backward_input) {
        const double recomputed =
            blocks_in(part) > 0 ? (in.activation_checkpointing ? block : 0.0) + block_backward_bytes(in) : 0.0;
        e.activation_bytes =
            std::max(e.activation_bytes, held + recomputed + (part == parts - 1 ? loss_extra : 0.0));
        held -= chunk_logits + (a.op == pipeline::Op::backward ? chunk_bytes : 0.0);
      } else if (a.op == pipeline::Op::backward_weight) {
        held -= chunk_bytes;
      }
    }
    e.states = model_states(in, static_cast<double>(e.params), dp, static_cast<double>(e.blocks));
    if (in.schedule == pipeline::ScheduleKind::zb_h1) held_window_gradients(in, static_cast<double>(e.params), dp, e.states);
    out.push_back(std::move(e));
  }
  return out;
}

std::string format_pipeline_estimate(const EstimateInput& in, int zero_stage) {
  if (zero_stage < 0 || zero_stage > 3) throw Error("ZeRO-" + std::to_string(zero_stage) + " is not a stage (0-3)");
  const std::vector<StageEstimate> stages = estimate_pipeline_stages(in);
  auto gib = [](double bytes) { return bytes / double(1ull << 30); };
  auto states_of = [](const StageEstimate& e, int zero, bool offload, bool offload_param = false) {
    for (const auto& x : e.states)
      if (x.stage == zero && x.offload_optimizer == offload && x.offload_param == offload_param) return x;
    return StateEstimate{};
  };
  const int64_t t = std::max<int64_t>(1, in.tensor_parallel);
  const int64_t gpus = in.nodes * in.gpus_per_node, dp = gpus / (in.pipeline_stages * t);
  const bool interleaved = in.schedule == pipeline::ScheduleKind::interleaved;
  const std::string tensor_parallel =
      t > 1 ? " x " + std::to_string(t) + " tensor-parallel" + (in.sequence_parallel ? " (sequence parallel)" : "")
            : "";
  const std::string chunks = interleaved ? " x " + std::to_string(in.virtual_stages) + " chunks" : "";
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line,
                "Estimated memory for %.3gB parameters on %lld node(s) x %lld GPU(s), %s training\n", in.params / 1e9,
                (long long)in.nodes, (long long)in.gpus_per_node, in.param_bytes == 2 ? "16-bit" : "fp32");
  out += line;
  std::snprintf(line, sizeof line,
                "  pipeline: %lld stages x %lld data-parallel%s, schedule %s%s, %lld micro-batches a step "
                "(micro-batch %lld, seq %lld, %s%s)\n",
                (long long)in.pipeline_stages, (long long)dp, tensor_parallel.c_str(),
                config::pipeline_schedule_name(in.schedule), chunks.c_str(),
                (long long)in.micro_batches, (long long)in.micro_batch, (long long)in.seq_len,
                in.activation_checkpointing ? "activation checkpointing" : "no checkpointing",
                in.mlp_activation_recomputed ? ", MLP activation recomputed" : "");
  out += line;
  if (in.fp8)
    out += "  fp8: each stage's model states hold its blocks' FP8 weight copies, W and its transpose (at ZeRO-3 "
           "the layer in use's)\n";
  if (in.experts > 0 && in.expert_parallel > 1) {
    std::snprintf(line, sizeof line,
                  "  expert parallel %lld: a GPU holds 1/%lld of its stage's experts, ZeRO over %lld GPUs of the "
                  "stage\n",
                  (long long)in.expert_parallel, (long long)in.expert_parallel, (long long)(dp / in.expert_parallel));
    out += line;
  }
  out += context_line(in);
  size_t width = 6;
  for (const auto& e : stages) width = std::max(width, e.layers.size());
  std::snprintf(line, sizeof line, "  per GPU at ZeRO-%d (GiB):\n  stage  ", zero_stage);
  out += line + std::string("layers").append(width - 6, ' ');
  out += "  parameters  model states  in flight  activations    total\n";
  double peak = 0;
  int peak_stage = 0;
  for (const auto& e : stages) {
    const double states = states_of(e, zero_stage, false).gpu_bytes, total = states + e.activation_bytes;
    if (total > peak) peak = total, peak_stage = e.stage;
    std::snprintf(line, sizeof line, "  %5d  ", e.stage);
    out += line + e.layers + std::string(width - e.layers.size(), ' ');
    std::snprintf(line, sizeof line, "  %9.1fM  %12.2f  %9d  %11.2f  %7.2f\n", e.params / 1e6, gib(states), e.in_flight,
                  gib(e.activation_bytes), gib(total));
    out += line;
  }
  std::snprintf(line, sizeof line, "  maximum: %.2f GiB per GPU (stage %d)\n", gib(peak), peak_stage);
  out += line;
  if (interleaved)
    out += "  (in flight counts micro-batch chunks: a micro-batch on each of a stage's chunks counts once per chunk)\n";
  // Every ZeRO choice at its busiest stage (which can differ from the table's).
  out += "  every ZeRO stage and offload choice, at its busiest stage (model states + activations):\n";
  out += "  ZeRO  offload_optimizer  offload_param   busiest stage   per GPU (GiB)   per node CPU (GiB)\n";
  for (const auto& row : stages.front().states) {
    double gpu = 0, cpu = 0;
    int busiest = 0;
    for (const auto& e : stages) {
      const StateEstimate x = states_of(e, row.stage, row.offload_optimizer, row.offload_param);
      if (x.gpu_bytes + e.activation_bytes > gpu) gpu = x.gpu_bytes + e.activation_bytes, busiest = e.stage;
    }
    // Ranks are stage-major (the pipeline the slowest axis): GPU g holds stage
    // g / (dp x tp), and a node's host the offloaded states of its GPUs' stages.
    for (int64_t node = 0; node < in.nodes; ++node) {
      double host = 0;
      for (int64_t g = node * in.gpus_per_node; g < (node + 1) * in.gpus_per_node; ++g)
        host += states_of(stages[g / (dp * t)], row.stage, row.offload_optimizer, row.offload_param).cpu_bytes_per_node /
                in.gpus_per_node;
      cpu = std::max(cpu, host);
    }
    std::snprintf(line, sizeof line, "  %4d  %-17s  %-13s   %13d   %13.2f   %18.2f\n", row.stage,
                  row.offload_optimizer ? "cpu" : "none", row.offload_param ? "cpu" : "none", busiest, gib(gpu), gib(cpu));
    out += line;
  }
  return out;
}

}  // namespace stratum::planning
