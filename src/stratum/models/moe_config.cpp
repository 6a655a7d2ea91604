#include "stratum/models/moe_config.h"

#include "stratum/core/error.h"

namespace stratum::models {

void apply_moe_section(ModelConfig& c, const config::MoeConfig& moe, const std::string& source) {
  if (!moe.present) return;
  const std::string where = source + ": moe.";
  if (!c.is_moe())
    throw Error(source + ": the \"moe\" section is given but model '" + c.name + "' (" + c.arch +
                ") is dense; remove the section or train a mixture of experts (tiny-mixtral, mixtral-8x7b, "
                "qwen3-30b-a3b, or a Mixtral / Qwen3-MoE directory)");
  if (moe.num_experts && *moe.num_experts != c.num_experts)
    throw Error(where + "num_experts is " + std::to_string(*moe.num_experts) + " but model '" + c.name + "' has " +
                std::to_string(c.num_experts) + " experts a layer (the model's shape is its own; drop the key or "
                "set it with --set num_experts=N)");
  if (moe.top_k && *moe.top_k != c.top_k)
    throw Error(where + "top_k is " + std::to_string(*moe.top_k) + " but model '" + c.name + "' routes each token to " +
                std::to_string(c.top_k) + " experts (drop the key or set it with --set top_k=N)");
  if (moe.expert_parallel_size > 1 && c.num_experts % moe.expert_parallel_size != 0)
    throw Error(where + "expert_parallel_size is " + std::to_string(moe.expert_parallel_size) +
                ", which does not divide the model's " + std::to_string(c.num_experts) + " experts");
  c.moe_capacity_factor = moe.capacity_factor;
  c.moe_drop_policy = moe.drop_policy;
  c.moe_load_balancing = moe.load_balancing;
  c.moe_aux_loss_coeff = moe.load_balancing == "none" ? 0.0 : moe.aux_loss_coeff;
  c.moe_z_loss_coeff = moe.z_loss_coeff;
  c.moe_expert_bias_rate = moe.expert_bias_update_rate;
  validate(c);
}

}  // namespace stratum::models
