#include "stratum/models/tensor_parallel_plan.h"

#include <ATen/ATen.h>

#include <vector>

#include "stratum/core/error.h"
#include "stratum/nn/tensor_parallel/layers.h"

namespace stratum::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void validate_tensor_parallel(const ModelConfig& c, int64_t t) {
  if (t <= 1) return;
  std::vector<std::string> problems;
  const std::string ranks = " is not divisible by the tensor-parallel size " + std::to_string(t);
  if (c.heads % t != 0) problems.push_back("heads " + std::to_string(c.heads) + ranks);
  if (!c.is_moe() && c.ffn_hidden % t != 0) problems.push_back("ffn_hidden " + std::to_string(c.ffn_hidden) + ranks);
  if (c.llama_family() && c.kv_heads % t != 0 && t % c.kv_heads != 0)
    problems.push_back("kv_heads " + std::to_string(c.kv_heads) + " and the tensor-parallel size " +
                       std::to_string(t) + " do not divide one another (split key/value heads need kv_heads % size "
                       "== 0; shared ones size % kv_heads == 0)");
  if (!problems.empty()) {
    std::string m = "model '" + c.name + "' at tensor-parallel size " + std::to_string(t) + ":";
    for (const auto& p : problems) m += "\n  " + p;
    throw Error(m);
  }
}

std::optional<nn::tp::ShardSpec> shard_spec(const ModelConfig& c, const std::string& name, int64_t t, int64_t r) {
  if (t <= 1) return std::nullopt;
  using nn::tp::ShardSpec;
  // A LoRA adapter is split as its layer: a column-parallel layer's B by rows
  // (A whole), a row-parallel layer's A by columns (B whole) (nn/lora_linear.h).
  for (const char* part : {"lora_A", "lora_B"}) {
    const std::string tail = std::string(".") + part + ".weight";
    if (!ends_with(name, tail)) continue;
    const auto base = shard_spec(c, name.substr(0, name.size() - tail.size()) + ".weight", t, r);
    if (!base || base->padded != 0) return std::nullopt;
    return base->dim == (part == std::string("lora_A") ? 1 : 0) ? base : std::nullopt;
  }
  const auto rows = [&](int64_t blocks = 1) { return ShardSpec{0, blocks, t, r, 0}; };
  const ShardSpec columns{1, 1, t, r, 0};
  if (ends_with(name, "wte.weight") || ends_with(name, "embed_tokens.weight") || ends_with(name, "lm_head.weight"))
    return ShardSpec{0, 1, t, r, nn::tp::padded_vocab_size(c.vocab_size, t), c.vocab_size};
  if (ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_attn.bias")) return rows(3);
  if (ends_with(name, "attn.c_proj.weight") || ends_with(name, "mlp.c_proj.weight")) return columns;
  if (ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_fc.bias")) return rows();
  if (ends_with(name, "self_attn.q_proj.weight") || ends_with(name, "mlp.gate_proj.weight") ||
      ends_with(name, "mlp.up_proj.weight"))
    return rows();
  if (ends_with(name, "self_attn.k_proj.weight") || ends_with(name, "self_attn.v_proj.weight")) {
    if (c.kv_heads % t == 0) return rows();
    // t / kv_heads consecutive ranks share key/value head r / (t / kv_heads).
    return ShardSpec{0, 1, c.kv_heads, r / (t / c.kv_heads), 0};
  }
  if (ends_with(name, "self_attn.o_proj.weight") || ends_with(name, "mlp.down_proj.weight")) return columns;
  // Qwen3's q/k norms: whole on every rank, each computing its heads' part of the gradient (summed over the group).
  if (ends_with(name, "self_attn.q_norm.weight") || ends_with(name, "self_attn.k_norm.weight"))
    return ShardSpec{0, 1, 1, 0, 0};
  return std::nullopt;
}

std::optional<nn::tp::ShardSpec> CausalLMImpl::shard_spec(const std::string& name, int64_t rank) const {
  return models::shard_spec(config_, name, tp_.size(), rank);
}

std::shared_ptr<CausalLMImpl> build_model(const ModelConfig& config, c10::Device init_device,
                                          const nn::tp::TensorParallel& tp) {
  if (!tp.enabled()) return build_model(config, init_device);
  validate(config);
  validate_tensor_parallel(config, tp.size());
  // Born sharded: a skeleton of this rank's pieces, each drawn whole then cut
  // (one whole parameter at a time on the rank).
  const std::shared_ptr<CausalLMImpl> model = construct_model(config, tp, c10::kMeta);
  nn::materialize(*model, init_device, at::typeMetaToScalarType(at::get_default_dtype()));
  return model;
}

}  // namespace stratum::models
