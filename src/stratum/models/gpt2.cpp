// GPT-2 as a LayerStack: [GPT2Embedding] [GPT2Block] x layers [GPT2FinalNorm] [LMHead].
// Pre-LayerNorm blocks, learned positions, tanh-GELU MLP, causal SDPA; names
// and semantics of Hugging Face's GPT2LMHeadModel.
#include <ATen/ATen.h>

#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/attention.h"
#include "stratum/nn/embedding.h"
#include "stratum/nn/layer_norm.h"
#include "stratum/nn/lm_head.h"
#include "stratum/nn/mlp.h"
#include "stratum/nn/parameter_modules.h"
#include "stratum/nn/tensor_parallel/random.h"

namespace stratum::models {

namespace {

nn::LayerNorm layer_norm(const ModelConfig& c, c10::Device device) { return nn::LayerNorm(c.hidden, c.norm_eps, device); }

// tokens [B, T] -> wte(tokens) + wpe(0..T-1), or wpe(position_ids) of packed rows
class GPT2Embedding : public nn::StackLayer {
 public:
  GPT2Embedding(const ModelConfig& c, nn::tp::TensorParallel tp, c10::Device device)
      : StackLayer("GPT2Embedding"), dropout_(c.dropout), tp_(std::move(tp)),
        vocab_(nn::tp::vocab_shard(c.vocab_size, tp_.size(), tp_.rank())) {
    wte = register_module("wte", nn::Embedding(vocab_.rows, c.hidden, device));
    wpe = register_module("wpe", nn::Embedding(c.max_seq_len, c.hidden, device));
  }
  at::Tensor forward(const at::Tensor& tokens) override {
    const int64_t T = tokens.size(-1);
    if (T > wpe->weight.size(0))
      throw Error("GPT-2: sequence of " + std::to_string(T) + " tokens is longer than max_seq_len " +
                  std::to_string(wpe->weight.size(0)));
    // Under sequence parallelism this rank's slice of the positions (the token rows come reduce-scattered).
    const int64_t local = tp_.sequence_parallel ? T / tp_.size() : T;
    const int64_t first = tp_.sequence_parallel ? tp_.rank() * local : 0;
    const at::Tensor rows = tp_.enabled() ? nn::tp::vocab_parallel_embedding(tokens, wte->weight, vocab_, tp_)
                                          : nn::embedding_lookup(wte->weight, tokens);
    // Packed rows (nn/sequence_layout.h): each example's positions from 0.
    const nn::SequenceLayout* packed = layout ? layout->get() : nullptr;
    const at::Tensor positions = packed ? nn::layout_of_length(*packed, T).position_ids.narrow(1, first, local)
                                        : at::arange(first, first + local, tokens.options().dtype(at::kLong));
    const at::Tensor x = rows + nn::embedding_lookup(wpe->weight, positions);
    return is_training() ? nn::tp::dropout_outside_region(x, dropout_, tp_) : x;
  }
  // The token embedding's lookup gradient (tied or not: a tied head adds a dense part).
  std::vector<at::Tensor> row_gradient_parameters() const override { return {wte->weight}; }
  nn::Embedding wte{nullptr}, wpe{nullptr};
  std::shared_ptr<const nn::SequenceLayoutSlot> layout;

 private:
  double dropout_;
  nn::tp::TensorParallel tp_;
  nn::tp::VocabShard vocab_;
};

// x + attn(ln_1(x)), then + mlp(ln_2(.)): HF's GPT2Block.
class GPT2Block : public nn::StackLayer {
 public:
  GPT2Block(const ModelConfig& c, const nn::tp::TensorParallel& tp, c10::Device device) : StackLayer("GPT2Block") {
    ln_1 = register_module("ln_1", layer_norm(c, device));
    attn = register_module("attn", std::make_shared<nn::FusedQKVAttentionImpl>(c.hidden, c.heads, c.attention_dropout_p(),
                                                                               c.dropout, tp, device));
    ln_2 = register_module("ln_2", layer_norm(c, device));
    mlp = register_module("mlp", std::make_shared<nn::GeluMLPImpl>(c.hidden, c.ffn_hidden, c.dropout,
                                                                    c.recompute_mlp_activation, tp, device));
    mlp->tile_tokens = c.tiled_mlp_tokens;
  }
  at::Tensor forward(const at::Tensor& x) override {
    // A norm feeding an FP8 projection hands over its output's amax (the cast's own pass over it spared).
    at::Tensor attn_in_amax, mlp_in_amax;
    const at::Tensor attn_in =
        nn::layer_norm(x, ln_1->weight, ln_1->bias, ln_1->eps, attn->takes_input_amax() ? &attn_in_amax : nullptr);
    const at::Tensor attended = attn->forward(attn_in, attn_in_amax);
    // The attention's residual add and ln_2 as one function (one backward pass for both).
    const auto [h, normed] = nn::add_layer_norm(x, attended, ln_2->weight, ln_2->bias, ln_2->eps,
                                                mlp->takes_input_amax() ? &mlp_in_amax : nullptr);
    return h + mlp->forward(normed, mlp_in_amax);
  }
  // A tiled MLP's weight gradients come back through autograd (nn/tiled_rows.h).
  bool linear_weights_fusable() const override { return mlp->tile_tokens == 0; }
  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  std::shared_ptr<nn::FusedQKVAttentionImpl> attn;
  std::shared_ptr<nn::GeluMLPImpl> mlp;
};

class GPT2FinalNorm : public nn::StackLayer {
 public:
  GPT2FinalNorm(const ModelConfig& c, c10::Device device) : StackLayer("GPT2FinalNorm") {
    ln_f = register_module("ln_f", layer_norm(c, device));
  }
  at::Tensor forward(const at::Tensor& x) override { return nn::layer_norm(x, ln_f->weight, ln_f->bias, ln_f->eps); }
  nn::LayerNorm ln_f{nullptr};
};

}  // namespace

std::shared_ptr<CausalLMImpl> construct_gpt2(const ModelConfig& c, const nn::tp::TensorParallel& tp, c10::Device device) {
  validate(c);
  if (c.arch != "gpt2") throw Error("build_gpt2: model '" + c.name + "' is arch '" + c.arch + "'");
  auto model = std::make_shared<CausalLMImpl>(c, tp, default_init_seed());
  auto embedding = std::make_shared<GPT2Embedding>(c, tp, device);
  embedding->layout = model->sequence_layout();
  model->append(embedding, "transformer");
  for (int64_t i = 0; i < c.layers; ++i) {
    auto block = std::make_shared<GPT2Block>(c, tp, device);
    block->attn->layout = model->sequence_layout();
    model->append(block, "transformer.h." + std::to_string(i));
  }
  model->append(std::make_shared<GPT2FinalNorm>(c, device), "transformer");
  auto head = c.tie_embeddings ? std::make_shared<nn::LMHeadLayer>(embedding->wte.ptr(), tp)
                                : std::make_shared<nn::LMHeadLayer>(c.hidden, model->vocab_shard().rows, tp, device);
  head->set_loss_tiling(c.tiled_loss_tokens, model->vocab_shard());
  model->append(head, "");
  return model;
}

}  // namespace stratum::models
