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
#include <memory>

#include <ATen/core/Tensor.h>

#include "stratum/models/model_config.h"
#include "stratum/nn/layer_stack.h"
#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/shard_spec.h"

namespace stratum::models {

class CausalLMImpl : public nn::LayerStackImpl, public nn::tp::ShardedModule {
 public:
  // `tp`: the layers are tensor-parallel shards over it (models/tensor_parallel_plan.h).
  explicit CausalLMImpl(ModelConfig config, nn::tp::TensorParallel tp = {});

  // Mean next-token cross-entropy of logits(tokens) against targets (fp32).
  // tokens, targets: int64 [B, T]; targets equal to -100 are ignored. Under
  // tensor parallelism the vocabulary-parallel loss of the stack's logit
  // shards, the same on every rank of the group. Under sequence parallelism a
  // length the group does not divide is padded on the right and the padding
  // ignored (logits: dropped).
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& targets);
  // That loss from the stack's output (a pipeline's last stage): the logits,
  // or under tensor parallelism this rank's vocabulary shard of them.
  at::Tensor loss(const at::Tensor& output, const at::Tensor& targets);
  // [B, T, vocab] in the model's dtype (gathered over the tensor-parallel
  // group, padding dropped). T may not exceed max_seq_len.
  at::Tensor logits(const at::Tensor& tokens);

  const ModelConfig& config() const { return config_; }
  const nn::tp::TensorParallel& tensor_parallel() const override { return tp_; }
  // Megatron's layout (models/tensor_parallel_plan.h).
  std::optional<nn::tp::ShardSpec> shard_spec(const std::string& name, int64_t rank) const override;
  // The rows of the vocabulary this rank's embedding and head hold.
  const nn::tp::VocabShard& vocab_shard() const { return vocab_; }

 private:
  ModelConfig config_;
  nn::tp::TensorParallel tp_;
  nn::tp::VocabShard vocab_;
};

// GPT-2 or LLaMA after config.arch; validates the config and initializes the
// weights (init_weights) from torch's global generator (seed it for repeatability).
// `init_device`: where the parameters are moved before init_weights (a GPU
// draws billions of values in moments; the host takes minutes for a 10B+ model).
std::shared_ptr<CausalLMImpl> build_model(const ModelConfig& config, c10::Device init_device = c10::kCPU);
std::shared_ptr<CausalLMImpl> build_gpt2(const ModelConfig& config, c10::Device init_device = c10::kCPU);
std::shared_ptr<CausalLMImpl> build_llama(const ModelConfig& config, c10::Device init_device = c10::kCPU);
// The layers alone, each with torch's own initialization, sharded over `tp`:
// for build_model (which then runs init_weights) and the sharded build
// (models/tensor_parallel_plan.h).
std::shared_ptr<CausalLMImpl> construct_model(const ModelConfig& config, const nn::tp::TensorParallel& tp = {});
std::shared_ptr<CausalLMImpl> construct_gpt2(const ModelConfig& config, const nn::tp::TensorParallel& tp);
std::shared_ptr<CausalLMImpl> construct_llama(const ModelConfig& config, const nn::tp::TensorParallel& tp);

// GPT-2's initialization for either architecture, by parameter name: weights
// normal(0, init_std), the residual projections (attn.c_proj, mlp.c_proj,
// self_attn.o_proj, mlp.down_proj) normal(0, init_std / sqrt(2 layers)),
// biases 0, norm weights 1.
// Parameters not on `device` are moved there first.
void init_weights(CausalLMImpl& model, c10::Device device = c10::kCPU);

// Mean cross-entropy in fp32 of logits [..., V] (any float dtype) against
// targets [...]; targets equal to -100 are ignored.
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace stratum::models
