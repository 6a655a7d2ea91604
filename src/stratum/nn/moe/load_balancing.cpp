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

at::Tensor aux_loss(const at::Tensor& scores, const at::Tensor& experts, int64_t num_experts, bool normalize_scores) {
  check_routing(scores, experts, num_experts, "aux_loss");
  const int64_t t = scores.size(0), k = experts.size(1);
  if (t == 0) return at::zeros({}, scores.options());
  const at::Tensor counts = tokens_per_expert(experts, num_experts).to(scores.scalar_type());
  const at::Tensor p = normalized(scores, normalize_scores).sum(0);  // Σ_t p_te
  return (counts * p).sum() * (static_cast<double>(num_experts) / (static_cast<double>(k) * t * t));
}

at::Tensor sequence_aux_loss(const at::Tensor& scores, const at::Tensor& experts, int64_t num_experts,
                             int64_t sequences, bool normalize_scores) {
  check_routing(scores, experts, num_experts, "sequence_aux_loss");
  const int64_t t = scores.size(0), k = experts.size(1);
  if (sequences < 1 || t % sequences != 0)
    throw Error("sequence_aux_loss: " + std::to_string(t) + " tokens are not " + std::to_string(sequences) +
                " sequences of one length");
  if (t == 0) return at::zeros({}, scores.options());
  const int64_t len = t / sequences;
  // c_se: one-hot of each assignment, summed over a sequence's tokens.
  const at::Tensor one_hot = at::zeros({t, num_experts}, scores.options())
                                 .scatter_add_(1, experts, at::ones(experts.sizes(), scores.options()));
  const at::Tensor counts = one_hot.view({sequences, len, num_experts}).sum(1);                         // [S, E]
  const at::Tensor p = normalized(scores, normalize_scores).view({sequences, len, num_experts}).sum(1);  // [S, E]
  return (counts * p).sum() * (static_cast<double>(num_experts) / (static_cast<double>(k) * len * len)) /
         static_cast<double>(sequences);
}

at::Tensor z_loss(const at::Tensor& logits) {
  if (logits.dim() != 2) throw Error("z_loss: need logits [T, E], got " + c10::str(logits.sizes()));
  if (logits.size(0) == 0) return at::zeros({}, logits.options().dtype(at::kFloat));
  return at::logsumexp(logits.to(at::kFloat), -1).square().mean();
}

at::Tensor attach_aux_loss(const at::Tensor& x, const at::Tensor& term, const at::Tensor& factor) {
  if (!term.requires_grad() || !c10::GradMode::is_enabled()) return x;
  // The factor travels as data, not as an input: detached, so autograd neither saves nor differentiates it.
  return AttachAuxLoss::apply(x, term, factor.defined() ? factor.detach() : at::ones({}, term.options()));
}

}  // namespace stratum::nn::moe
