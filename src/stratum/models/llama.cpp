// LLaMA as a LayerStack: [LlamaEmbedding] [LlamaDecoderLayer] x layers [LlamaFinalNorm] [LMHead].
// Pre-RMSNorm blocks, RoPE (rotate_half), grouped-query attention, SwiGLU MLP;
// names and semantics of Hugging Face's LlamaForCausalLM.
#include <ATen/ATen.h>

#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/attention.h"
#include "stratum/nn/embedding.h"
#include "stratum/nn/lm_head.h"
#include "stratum/nn/mlp.h"
#include "stratum/nn/moe/sparse_moe.h"
#include "stratum/nn/parameter_modules.h"
#include "stratum/nn/rms_norm.h"

namespace stratum::models {

namespace {

class LlamaEmbedding : public nn::StackLayer {
 public:
  LlamaEmbedding(const ModelConfig& c, nn::tp::TensorParallel tp, c10::Device device)
      : StackLayer("LlamaEmbedding"), max_seq_len_(c.max_seq_len), tp_(std::move(tp)),
        vocab_(nn::tp::vocab_shard(c.vocab_size, tp_.size(), tp_.rank())) {
    embed_tokens = register_module("embed_tokens", nn::Embedding(vocab_.rows, c.hidden, device));
  }
  at::Tensor forward(const at::Tensor& tokens) override {
    if (tokens.size(-1) > max_seq_len_)
      throw Error("LLaMA: sequence of " + std::to_string(tokens.size(-1)) + " tokens is longer than max_seq_len " +
                  std::to_string(max_seq_len_));
    return tp_.enabled() ? nn::tp::vocab_parallel_embedding(tokens, embed_tokens->weight, vocab_, tp_)
                         : nn::embedding_lookup(embed_tokens->weight, tokens);
  }
  // The token embedding's lookup gradient (tied or not: a tied head adds a dense part).
  std::vector<at::Tensor> row_gradient_parameters() const override { return {embed_tokens->weight}; }
  nn::Embedding embed_tokens{nullptr};

 private:
  int64_t max_seq_len_;
  nn::tp::TensorParallel tp_;
  nn::tp::VocabShard vocab_;
};

// x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(.)):
// LLaMA's SwiGLU MLP, or a mixture of experts (Mixtral's "block_sparse_moe",
// Qwen3-MoE's "mlp").
class LlamaDecoderLayer : public nn::StackLayer {
 public:
  LlamaDecoderLayer(const ModelConfig& c, int64_t index, std::shared_ptr<nn::RotaryEmbedding> rope,
                    const nn::tp::TensorParallel& tp, std::shared_ptr<nn::moe::RoutingRecord> routing,
                    c10::Device device, const nn::moe::ExpertParallel& ep)
      : StackLayer(c.arch == "mixtral"     ? "MixtralDecoderLayer"
                   : c.arch == "qwen3_moe" ? "Qwen3MoeDecoderLayer"
                                           : "LlamaDecoderLayer") {
    input_layernorm = register_module("input_layernorm", std::make_shared<nn::RMSNormImpl>(c.hidden, c.norm_eps, device));
    self_attn = register_module("self_attn", std::make_shared<nn::GroupedQueryAttentionImpl>(
                                                 c.hidden, c.heads, c.kv_heads, std::move(rope), c.attention_dropout_p(),
                                                 tp, device, c.explicit_head_dim, c.qk_norm ? c.norm_eps : 0.0));
    post_attention_layernorm =
        register_module("post_attention_layernorm", std::make_shared<nn::RMSNormImpl>(c.hidden, c.norm_eps, device));
    if (c.is_moe())
      moe = register_module(c.arch == "mixtral" ? "block_sparse_moe" : "mlp",
                            std::make_shared<nn::moe::SparseMoEImpl>(moe_options(c), index, std::move(routing),
                                                                     device, ep, tp));
    else
      mlp = register_module("mlp", std::make_shared<nn::SwiGLUMLPImpl>(c.hidden, c.ffn_hidden,
                                                                        c.recompute_mlp_activation, tp, device));
    if (mlp) mlp->tile_tokens = c.tiled_mlp_tokens;  // a mixture of experts runs untiled
  }
  at::Tensor forward(const at::Tensor& x) override {
    // A norm feeding an FP8 projection hands over its output's amax (the cast's own pass over it spared).
    at::Tensor attn_in_amax, mlp_in_amax;
    const at::Tensor attn_in = input_layernorm->forward(x, self_attn->takes_input_amax() ? &attn_in_amax : nullptr);
    const at::Tensor h = x + self_attn->forward(attn_in, attn_in_amax);
    const at::Tensor n = post_attention_layernorm->forward(h, mlp && mlp->takes_input_amax() ? &mlp_in_amax : nullptr);
    return h + (moe ? moe->forward(n) : mlp->forward(n, mlp_in_amax));
  }
  // The experts' grouped GEMMs write their weights' gradients themselves, a
  // tiled MLP's come back through autograd (nn/tiled_rows.h).
  bool linear_weights_fusable() const override { return moe == nullptr && mlp->tile_tokens == 0; }
  std::shared_ptr<nn::RMSNormImpl> input_layernorm, post_attention_layernorm;
  std::shared_ptr<nn::GroupedQueryAttentionImpl> self_attn;
  std::shared_ptr<nn::SwiGLUMLPImpl> mlp;             // dense
  std::shared_ptr<nn::moe::SparseMoEImpl> moe;        // mixture of experts
};

class LlamaFinalNorm : public nn::StackLayer {
 public:
  LlamaFinalNorm(const ModelConfig& c, c10::Device device) : StackLayer("LlamaFinalNorm") {
    norm = register_module("norm", std::make_shared<nn::RMSNormImpl>(c.hidden, c.norm_eps, device));
  }
  at::Tensor forward(const at::Tensor& x) override { return norm->forward(x); }
  std::shared_ptr<nn::RMSNormImpl> norm;
};

}  // namespace

nn::moe::MoEOptions moe_options(const ModelConfig& c) {
  nn::moe::MoEOptions o;
  o.hidden = c.hidden;
  o.ffn_hidden = c.moe_ffn_hidden;
  o.shared_ffn_hidden = c.shared_expert_ffn_hidden;
  o.router.num_experts = c.num_experts;
  o.router.top_k = c.top_k;
  o.router.score = nn::moe::score_function(c.router_score);
  o.router.normalize_top_k = c.norm_topk_prob;
  o.router.groups = c.router_groups;
  o.router.top_groups = c.router_top_groups;
  o.router.scaling = c.routed_scaling_factor;
  if (c.arch == "mixtral") o.names = {"w1", "w3", "w2"};
  o.capacity_factor = c.moe_capacity_factor;
  o.drop_policy = c.moe_drop_policy == "position" ? nn::moe::DropPolicy::position : nn::moe::DropPolicy::probs;
  o.balancing = c.moe_load_balancing == "seq_aux_loss" ? nn::moe::Balancing::sequence_aux_loss
                : c.moe_load_balancing == "none"       ? nn::moe::Balancing::none
                                                       : nn::moe::Balancing::aux_loss;
  o.aux_loss_coeff = c.moe_aux_loss_coeff;
  o.z_loss_coeff = c.moe_z_loss_coeff;
  o.expert_bias_rate = c.moe_expert_bias_rate;
  o.recompute_activation = c.recompute_mlp_activation;
  return o;
}

std::shared_ptr<CausalLMImpl> construct_llama(const ModelConfig& c, const nn::tp::TensorParallel& tp, c10::Device device,
                                              const nn::moe::ExpertParallel& ep) {
  validate(c);
  if (!c.llama_family()) throw Error("build_llama: model '" + c.name + "' is arch '" + c.arch + "'");
  auto model = std::make_shared<CausalLMImpl>(c, tp, default_init_seed());
  model->set_expert_parallel(ep);
  auto embedding = std::make_shared<LlamaEmbedding>(c, tp, device);
  model->append(embedding, "model");
  nn::RopeScaling scaling;
  scaling.factor = c.rope_scaling_factor;
  scaling.low_freq_factor = c.rope_low_freq_factor;
  scaling.high_freq_factor = c.rope_high_freq_factor;
  scaling.original_max_seq_len = c.rope_original_max_seq_len;
  auto rope = std::make_shared<nn::RotaryEmbedding>(c.head_dim(), c.rope_theta, scaling);
  for (int64_t i = 0; i < c.layers; ++i) {
    auto layer = std::make_shared<LlamaDecoderLayer>(c, i, rope, tp, model->routing_record(), device, ep);
    layer->self_attn->layout = model->sequence_layout();
    if (layer->moe) layer->moe->layout = model->sequence_layout();  // its context-parallel group, if any
    model->append(layer, "model.layers." + std::to_string(i));
  }
  model->append(std::make_shared<LlamaFinalNorm>(c, device), "model");
  auto head = c.tie_embeddings ? std::make_shared<nn::LMHeadLayer>(embedding->embed_tokens.ptr(), tp)
                                : std::make_shared<nn::LMHeadLayer>(c.hidden, model->vocab_shard().rows, tp, device);
  head->set_loss_tiling(c.tiled_loss_tokens, model->vocab_shard());
  model->append(head, "");
  return model;
}

}  // namespace stratum::models
