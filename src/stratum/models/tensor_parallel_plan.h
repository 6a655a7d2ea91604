#pragma once
// Which parameters of GPT-2 and LLaMA tensor parallelism splits, and how
// (Megatron's layout), by Hugging Face name: what builds a sharded model from
// the whole one, and what reads a shard back into the whole tensor.
//
//   GPT-2: c_attn (weight, bias) by head within each of q, k, v; attn.c_proj
//          and mlp.c_proj weights by input column (their biases replicated);
//          c_fc by row; wte / lm_head by vocabulary row (padded).
//   LLaMA: q_proj by head; k_proj / v_proj by key/value head, or (fewer
//          key/value heads than ranks) the head this rank's query heads read;
//          o_proj and down_proj by input column; gate_proj / up_proj by row;
//          embed_tokens / lm_head by vocabulary row (padded).
// Everything else (norms, GPT-2's positions) is replicated.
#include <memory>
#include <optional>
#include <string>

#include "stratum/models/causal_lm.h"
#include "stratum/nn/tensor_parallel/shard_spec.h"

namespace stratum::models {

// Throws stratum::Error listing every dimension `size` ranks cannot split
// (heads, key/value heads, the MLP's width), each with its numbers.
void validate_tensor_parallel(const ModelConfig& config, int64_t size);

// The spec of parameter `name` at rank `rank` of `size`; nullopt: replicated.
std::optional<nn::tp::ShardSpec> shard_spec(const ModelConfig& config, const std::string& name, int64_t size,
                                            int64_t rank);

// GPT-2 or LLaMA sharded over `tp`, born sharded: each rank draws only its
// pieces (each parameter drawn whole, as build_model(config, init_device)
// draws it, then cut), so TP = t starts from TP = 1's weights and a rank
// never holds more than its pieces and one whole parameter. tp of one rank:
// build_model itself.
std::shared_ptr<CausalLMImpl> build_model(const ModelConfig& config, c10::Device init_device,
                                          const nn::tp::TensorParallel& tp);

}  // namespace stratum::models
