#include "stratum/nn/moe/load_balancing.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"

namespace stratum::nn::moe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor normalized(const at::Tensor& scores, bool normalize) {
  return normalize ? scores / (scores.sum(-1, true) + 1e-20) : scores;
}

struct AttachAuxLoss : torch::autograd::Function<AttachAuxLoss> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& term,
                            const at::Tensor& factor) {
    // Read in backward: the trainer sets it just before. Not an input: it takes no gradient.
    ctx->saved_data["factor"] = factor;
    ctx->saved_data["like"] = at::empty({0}, term.options());
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor factor = ctx->saved_data["factor"].toTensor();
    const at::Tensor like = ctx->saved_data["like"].toTensor();
    return {grads[0], factor.to(like.options(), /*non_blocking=*/true).clone(), at::Tensor()};
  }
};

void check_routing(const at::Tensor& scores, const at::Tensor& experts, int64_t num_experts, const char* what) {
  if (scores.dim() != 2 || scores.size(1) != num_experts || experts.dim() != 2 || experts.size(0) != scores.size(0))
    throw Error(std::string(what) + ": need scores [T, " + std::to_string(num_experts) + "] and experts [T, k], got " +
                c10::str(scores.sizes()) + " and " + c10::str(experts.sizes()));
}

}  // namespace

at::Tensor tokens_per_expert(const at::Tensor& experts, int64_t num_experts) {
  return at::bincount(experts.reshape({-1}), {}, num_experts);
}

at::Tensor tokens_per_sequence_and_expert(const at::Tensor& experts, int64_t num_experts, int64_t sequences) {
  const int64_t t = experts.size(0);
  if (sequences < 1 || t % sequences != 0)
    throw Error("tokens_per_sequence_and_expert: " + std::to_string(t) + " tokens are not " + std::to_string(sequences) +
                " sequences of one length");
  if (t == 0) return at::zeros({sequences, num_experts}, experts.options().dtype(at::kLong));
  // Each assignment's (sequence, expert) cell, counted.
  const at::Tensor sequence = at::arange(t, experts.options()).floor_divide(t / sequences);
  const at::Tensor cell = (sequence.unsqueeze(1) * num_experts + experts).reshape({-1});
  return at::bincount(cell, {}, sequences * num_experts).view({sequences, num_experts});
}

at::Tensor aux_loss_share(const at::Tensor& scores, const at::Tensor& counts, int64_t total_tokens, int64_t top_k,
                          bool normalize_scores) {
  const int64_t e = scores.dim() == 2 ? scores.size(1) : -1;
  if (e < 0 || counts.dim() != 1 || counts.size(0) != e || top_k < 1 || total_tokens < scores.size(0))
    throw Error("aux_loss_share: need scores [T, E], counts [E], top_k >= 1 and at least T tokens in all; got " +
                c10::str(scores.sizes()) + ", " + c10::str(counts.sizes()) + ", top_k " + std::to_string(top_k) +
                ", " + std::to_string(total_tokens) + " tokens");
  if (total_tokens == 0) return at::zeros({}, scores.options());
  const at::Tensor p = normalized(scores, normalize_scores).sum(0);  // Σ_t p_te over this rank's tokens
  const double t = static_cast<double>(total_tokens);
  return (counts.to(scores.scalar_type()) * p).sum() * (static_cast<double>(e) / (static_cast<double>(top_k) * t * t));
}

at::Tensor sequence_aux_loss_share(const at::Tensor& scores, const at::Tensor& counts, int64_t sequence_length,
                                   int64_t top_k, bool normalize_scores) {
  const int64_t e = scores.dim() == 2 ? scores.size(1) : -1, s = counts.dim() == 2 ? counts.size(0) : 0;
  if (e < 0 || s < 1 || counts.size(1) != e || scores.size(0) % s != 0 || top_k < 1 ||
      sequence_length < scores.size(0) / s)
    throw Error("sequence_aux_loss_share: need scores [S x slice, E], counts [S, E], top_k >= 1 and sequences at "
                "least a slice long; got " + c10::str(scores.sizes()) + ", " + c10::str(counts.sizes()) + ", top_k " +
                std::to_string(top_k) + ", sequence length " + std::to_string(sequence_length));
  if (scores.size(0) == 0) return at::zeros({}, scores.options());
  const at::Tensor p = normalized(scores, normalize_scores).view({s, scores.size(0) / s, e}).sum(1);  // [S, E]
  const double len = static_cast<double>(sequence_length);
  return (counts.to(scores.scalar_type()) * p).sum() * (static_cast<double>(e) / (static_cast<double>(top_k) * len * len)) /
         static_cast<double>(s);
}

at::Tensor z_loss_share(const at::Tensor& logits, int64_t total_tokens) {
  if (logits.dim() != 2 || total_tokens < logits.size(0))
    throw Error("z_loss_share: need logits [T, E] and at least T tokens in all, got " + c10::str(logits.sizes()) +
                " and " + std::to_string(total_tokens));
  if (logits.size(0) == 0) return at::zeros({}, logits.options().dtype(at::kFloat));
  return at::logsumexp(logits.to(at::kFloat), -1).square().sum() / static_cast<double>(total_tokens);
}

at::Tensor aux_loss(const at::Tensor& scores, const at::Tensor& experts, int64_t num_experts, bool normalize_scores) {
  check_routing(scores, experts, num_experts, "aux_loss");
  if (scores.size(0) == 0) return at::zeros({}, scores.options());
  return aux_loss_share(scores, tokens_per_expert(experts, num_experts), scores.size(0), experts.size(1),
                        normalize_scores);
}

at::Tensor sequence_aux_loss(const at::Tensor& scores, const at::Tensor& experts, int64_t num_experts,
                             int64_t sequences, bool normalize_scores) {
  check_routing(scores, experts, num_experts, "sequence_aux_loss");
  const int64_t t = scores.size(0);
  if (sequences < 1 || t % sequences != 0)
    throw Error("sequence_aux_loss: " + std::to_string(t) + " tokens are not " + std::to_string(sequences) +
                " sequences of one length");
  if (t == 0) return at::zeros({}, scores.options());
  return sequence_aux_loss_share(scores, tokens_per_sequence_and_expert(experts, num_experts, sequences),
                                 t / sequences, experts.size(1), normalize_scores);
}

at::Tensor z_loss(const at::Tensor& logits) {
  if (logits.dim() != 2) throw Error("z_loss: need logits [T, E], got " + c10::str(logits.sizes()));
  return z_loss_share(logits, logits.size(0));
}

at::Tensor attach_aux_loss(const at::Tensor& x, const at::Tensor& term, const at::Tensor& factor) {
  if (!term.requires_grad() || !c10::GradMode::is_enabled()) return x;
  // The factor travels as data, not as an input: detached, so autograd neither saves nor differentiates it.
  return AttachAuxLoss::apply(x, term, factor.defined() ? factor.detach() : at::ones({}, term.options()));
}

}  // namespace stratum::nn::moe
