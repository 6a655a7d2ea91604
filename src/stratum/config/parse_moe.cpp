// The "moe" section: how a mixture of experts' routing trains, with
// Megatron-Core's and DeepSpeed's names where they have one (num_experts,
// top_k, capacity_factor, aux_loss_coeff, expert_parallel_size).
#include "stratum/config/parse_sections.h"
#include "stratum/core/error.h"

namespace stratum::config {
namespace {
// DeepSeek-V3's 256 experts and far beyond; a bound on what a config can ask to build.
constexpr int64_t kMaxExperts = int64_t{1} << 16;
}  // namespace

void parse_moe(KeyReader& root, Config& config) {
  KeyReader moe = root.child("moe");
  if (!moe.present()) return;
  MoeConfig& m = config.moe;
  Diagnostics& diag = moe.diagnostics();
  m.present = true;
  m.num_experts = moe.get_opt_int("num_experts", 1, kMaxExperts);
  m.top_k = moe.get_opt_int("top_k", 1, kMaxExperts);
  if (m.num_experts && m.top_k && *m.top_k > *m.num_experts)
    diag.error(moe.path_of("top_k"), "is " + std::to_string(*m.top_k) + ", more than num_experts (" +
                                         std::to_string(*m.num_experts) + ")");
  m.expert_parallel_size = moe.get_int("expert_parallel_size", 1, 1, kMaxExperts);
  if (m.num_experts && *m.num_experts % m.expert_parallel_size != 0)
    diag.error(moe.path_of("expert_parallel_size"),
               "is " + std::to_string(m.expert_parallel_size) + ", which does not divide num_experts (" +
                   std::to_string(*m.num_experts) + "): each expert-parallel rank holds num_experts / size experts");
  // null: dropless, as Megatron-Core's moe_expert_capacity_factor None.
  m.capacity_factor = moe.get_opt_double("capacity_factor", 0.0, KeyReader::kInf).value_or(0.0);
  m.drop_policy = moe.get_enum("drop_policy", m.drop_policy, {"probs", "position"});
  if (moe.has("drop_policy") && m.capacity_factor == 0)
    diag.error(moe.path_of("drop_policy"), "is given but nothing is dropped: capacity_factor is 0 (dropless); set a "
                                           "capacity_factor or leave drop_policy out");
  m.load_balancing = moe.get_enum("load_balancing", m.load_balancing, {"aux_loss", "seq_aux_loss", "none"});
  m.aux_loss_coeff = moe.get_double("aux_loss_coeff", m.aux_loss_coeff, 0.0, 1e3);
  if (m.load_balancing == "none" && moe.has("aux_loss_coeff") && m.aux_loss_coeff > 0)
    diag.error(moe.path_of("aux_loss_coeff"), "is " + std::to_string(m.aux_loss_coeff) +
                                                  " but load_balancing is \"none\": no auxiliary loss is computed");
  m.z_loss_coeff = moe.get_double("z_loss_coeff", m.z_loss_coeff, 0.0, 1e3);
  m.expert_bias_update_rate = moe.get_double("expert_bias_update_rate", 0.0, 0.0, 1.0);
  moe.finish();
}

}  // namespace stratum::config
