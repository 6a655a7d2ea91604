#pragma once
// A built-in causal language model: a LayerStack (embedding layer, one layer
// per transformer block, final norm, LM head) plus its ModelConfig.
//
//   auto model = models::build_model(models::make_model_config("gpt2-124m", {{"layers", "6"}}));
//   at::Tensor loss = model->forward(tokens, targets);   // what the engine calls
//   at::Tensor logits = model->logits(tokens);           // [B, T, vocab]
//
// Parameter names are Hugging Face's (transformer.h.0.attn.c_attn.weight,
// model.layers.0.self_attn.q_proj.weight, ...). With tied embeddings the LM
// head borrows the token embedding and there is no lm_head.weight parameter.
//
// Initial values are drawn per parameter from a generator seeded by (the
// model's seed, the parameter's name): any rank can draw any parameter alone,
// so a model is born sharded (a skeleton of shapes, each rank
// materialising only its stage, its tensor-parallel pieces, its ZeRO-3
// partition) with the values the whole model has in one process.
#include <map>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "stratum/models/model_config.h"
#include "stratum/nn/deferred_init.h"
#include "stratum/nn/layer_stack.h"
#include "stratum/nn/moe/routing_record.h"
#include "stratum/nn/moe/sparse_moe.h"
#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/shard_spec.h"

namespace stratum::nn {
class LinearImpl;
class LMHeadLayer;
}

namespace stratum::models {

class CausalLMImpl : public nn::LayerStackImpl, public nn::tp::ShardedModule, public nn::DeferredInit {
 public:
  // `tp`: the layers are tensor-parallel shards over it (models/tensor_parallel_plan.h).
  // `init_seed`: the seed of every parameter's initial value.
  CausalLMImpl(ModelConfig config, nn::tp::TensorParallel tp, uint64_t init_seed);

  // Mean next-token cross-entropy of logits(tokens) against targets (fp32).
  // tokens, targets: int64 [B, T]; targets equal to -100 are ignored. Under
  // tensor parallelism the vocabulary-parallel loss of the stack's logit
  // shards, the same on every rank of the group. Under sequence parallelism a
  // length the group does not divide is padded on the right and the padding
  // ignored (logits: dropped). With tiled_loss_tokens (a plain head weight)
  // the head computes the loss itself a tile at a time, never holding
  // [B, T, vocab] logits (nn/tiled_lm_loss.h), nor their vocabulary shards
  // under tensor parallelism (nn/tensor_parallel/tiled_vocab_loss.h).
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& targets);
  // That loss from the stack's output (a pipeline's last stage): the logits,
  // or under tensor parallelism this rank's vocabulary shard of them, or,
  // after set_stage_targets, the tiled loss itself (passed through).
  at::Tensor loss(const at::Tensor& output, const at::Tensor& targets);
  // A pipeline's last stage, before it runs the head for `targets` (undefined:
  // for logits): with tiled_loss_tokens the head then returns the loss of its
  // output against them, a tile at a time, as forward(tokens, targets) does.
  void set_stage_targets(const at::Tensor& targets);
  // [B, T, vocab] in the model's dtype (gathered over the tensor-parallel
  // group, padding dropped). T may not exceed max_seq_len.
  at::Tensor logits(const at::Tensor& tokens);
  // logits() in two halves, for a pipeline whose first stage reads the tokens
  // and whose last holds the stack's output: the stack's input (tokens padded
  // for sequence parallelism), and the whole logits [B, length, vocab] of the
  // stack's output (gathered over the tensor-parallel group, padding dropped).
  at::Tensor stack_input(const at::Tensor& tokens) const;
  at::Tensor logits_of_output(const at::Tensor& output, int64_t length) const;

  const ModelConfig& config() const { return config_; }
  const nn::tp::TensorParallel& tensor_parallel() const override { return tp_; }
  // Megatron's layout (models/tensor_parallel_plan.h).
  std::optional<nn::tp::ShardSpec> shard_spec(const std::string& name, int64_t rank) const override;
  // The rows of the vocabulary this rank's embedding and head hold.
  const nn::tp::VocabShard& vocab_shard() const { return vocab_; }
  // Parameter `name`'s initial value: the whole parameter drawn as the whole
  // model draws it, then this rank's tensor-parallel piece of it.
  at::Tensor initial_value(const std::string& name, c10::Device device, at::ScalarType dtype) const override;
  uint64_t init_seed() const { return init_seed_; }
  // The frozen weights LoRA holds in NF4 (models/lora.h): drawn, or set from
  // this rank's piece of a loaded tensor, straight into 4 bits (one weight
  // at a time in 16 or 32 bits, never the model).
  // apply_lora names them (`weight` is the parameter's name).
  void hold_in_nf4(const std::string& weight, nn::LinearImpl* layer) { nf4_layers_[weight] = layer; }
  bool held_apart(const std::string& name) const override;
  void draw_apart(const std::string& name, c10::Device device, at::ScalarType dtype) override;
  bool set_apart(const std::string& name, const at::Tensor& value) override;
  bool set_apart_nf4(const std::string& name, const quant::Nf4Tensor& value) override;

  // What the mixture-of-experts layers record and read (nn/moe/routing_record.h);
  // every model has one, unused by a dense one.
  const std::shared_ptr<nn::moe::RoutingRecord>& routing_record() const { return routing_; }
  // The group its experts are split over (none: every expert here).
  const nn::moe::ExpertParallel& expert_parallel() const { return ep_; }
  void set_expert_parallel(nn::moe::ExpertParallel ep) { ep_ = std::move(ep); }
  // Whether `name` is a weight of an expert another expert-parallel rank holds
  // ("model.layers.3.mlp.experts.17.up_proj.weight" on a rank without expert 17).
  bool expert_held_elsewhere(const std::string& name) const;
  // The mixture-of-experts blocks of the layers this rank holds, in layer order.
  std::vector<nn::moe::SparseMoEImpl*> moe_layers() const;

 private:
  // The last layer when it computes the tiled loss (tiled_loss_tokens), else null.
  nn::LMHeadLayer* tiled_head() const;

  std::shared_ptr<nn::moe::RoutingRecord> routing_ = std::make_shared<nn::moe::RoutingRecord>();
  nn::moe::ExpertParallel ep_;
  ModelConfig config_;
  nn::tp::TensorParallel tp_;
  nn::tp::VocabShard vocab_;
  uint64_t init_seed_;
  std::map<std::string, nn::LinearImpl*> nf4_layers_;  // by weight name; the layers are this model's modules
};

// GPT-2 or LLaMA after config.arch; validates the config and initializes the
// weights (initial_value) on `init_device` (a GPU draws billions of values in
// moments; the host takes minutes for a 10B+ model). The seed is that of
// torch's global CPU generator (torch::manual_seed); the generator itself is
// not drawn from. Nothing but the parameters is ever allocated: the model is
// made as a skeleton, then each parameter drawn.
std::shared_ptr<CausalLMImpl> build_model(const ModelConfig& config, c10::Device init_device = c10::kCPU);
// The seed build_model and construct_model give a model: that of torch's
// global CPU generator (torch::manual_seed).
uint64_t default_init_seed();
// The layers alone, on `device`, sharded over `tp`, seeded as build_model
// seeds. For the meta device: a skeleton (shapes only, nn/deferred_init.h) that allocates nothing;
// nn::materialize then draws what a rank keeps. On another device each layer
// starts with torch's own initialization (init_weights replaces it).
// `ep`: a mixture of experts' layers hold their share of the experts (nn/moe/sparse_moe.h).
std::shared_ptr<CausalLMImpl> construct_model(const ModelConfig& config, const nn::tp::TensorParallel& tp = {},
                                              c10::Device device = c10::kCPU, const nn::moe::ExpertParallel& ep = {});
std::shared_ptr<CausalLMImpl> construct_gpt2(const ModelConfig& config, const nn::tp::TensorParallel& tp,
                                             c10::Device device);
std::shared_ptr<CausalLMImpl> construct_llama(const ModelConfig& config, const nn::tp::TensorParallel& tp,
                                              c10::Device device, const nn::moe::ExpertParallel& ep = {});

// A mixture of experts' layer options from the model's config.
nn::moe::MoEOptions moe_options(const ModelConfig& config);

// GPT-2's initialization for either architecture, by parameter name: weights
// normal(0, init_std), the residual projections (attn.c_proj, mlp.c_proj,
// self_attn.o_proj, mlp.down_proj) normal(0, init_std / sqrt(2 layers)),
// biases 0, norm weights 1; each parameter from its own generator, seeded by
// `seed` and its name. `shape` is the whole parameter's. fp32.
at::Tensor initial_whole_value(const ModelConfig& config, const std::string& name, at::IntArrayRef shape, uint64_t seed,
                               c10::Device device);
// Every parameter of `model` (skeleton or not) set to its initial value on `device`.
void init_weights(CausalLMImpl& model, c10::Device device = c10::kCPU);

// Mean cross-entropy in fp32 of logits [..., V] (any float dtype) against
// targets [...]; targets equal to -100 are ignored.
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace stratum::models
