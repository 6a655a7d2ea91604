#include "stratum/nn/moe/router.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

#include "stratum/core/error.h"

namespace stratum::nn::moe {

ScoreFunction score_function(const std::string& name) {
  if (name == "softmax") return ScoreFunction::softmax;
  if (name == "sigmoid") return ScoreFunction::sigmoid;
  throw Error("router score function '" + name + "': expected \"softmax\" or \"sigmoid\"");
}

const char* score_function_name(ScoreFunction f) { return f == ScoreFunction::softmax ? "softmax" : "sigmoid"; }

void check(const RouterOptions& o) {
  std::vector<std::string> problems;
  const std::string e = std::to_string(o.num_experts), k = std::to_string(o.top_k);
  if (o.num_experts < 1) problems.push_back("num_experts " + e + " must be at least 1");
  if (o.top_k < 1 || o.top_k > o.num_experts)
    problems.push_back("top_k " + k + " must be between 1 and num_experts (" + e + ")");
  if (o.groups < 1 || (o.num_experts > 0 && o.num_experts % o.groups != 0))
    problems.push_back("router groups " + std::to_string(o.groups) + " must divide num_experts (" + e + ")");
  if (o.top_groups < 1 || o.top_groups > o.groups)
    problems.push_back("router top groups " + std::to_string(o.top_groups) + " must be between 1 and groups (" +
                       std::to_string(o.groups) + ")");
  else if (o.groups > 1 && o.num_experts % o.groups == 0 && o.num_experts / o.groups * o.top_groups < o.top_k)
    problems.push_back("the top " + std::to_string(o.top_groups) + " groups hold " +
                       std::to_string(o.num_experts / o.groups * o.top_groups) + " experts, fewer than top_k (" + k +
                       ")");
  if (o.groups > 1 && o.num_experts % o.groups == 0 && o.num_experts / o.groups < 2)
    problems.push_back("group-limited routing scores a group by its two best experts; " + std::to_string(o.groups) +
                       " groups of " + e + " experts leave fewer than two a group");
  if (!(o.scaling > 0)) problems.push_back("routed scaling factor must be positive");
  if (problems.empty()) return;
  std::string msg = "MoE router: ";
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  throw Error(msg);
}

Routing route(const at::Tensor& logits, const at::Tensor& bias, const RouterOptions& o) {
  if (logits.dim() != 2 || logits.size(1) != o.num_experts)
    throw Error("MoE router: logits must be [tokens, " + std::to_string(o.num_experts) + "], got " +
                c10::str(logits.sizes()));
  Routing r;
  const at::Tensor z = logits.to(at::kFloat);
  r.scores = o.score == ScoreFunction::softmax ? at::softmax(z, -1) : at::sigmoid(z);
  // The choice reads no gradient: only the chosen scores carry one.
  at::Tensor choice = r.scores.detach();
  if (bias.defined()) choice = choice + bias.to(at::kFloat);
  if (o.groups > 1) {
    const int64_t tokens = choice.size(0), per_group = o.num_experts / o.groups;
    const at::Tensor grouped = choice.view({tokens, o.groups, per_group});
    const at::Tensor group_scores = std::get<0>(grouped.topk(2, -1)).sum(-1);                  // [tokens, groups]
    const at::Tensor best_groups = std::get<1>(group_scores.topk(o.top_groups, -1, true, true));  // [tokens, top_groups]
    const at::Tensor keep = at::zeros_like(group_scores, group_scores.options().dtype(at::kBool))
                                .scatter_(1, best_groups, true)
                                .unsqueeze(-1)
                                .expand({tokens, o.groups, per_group})
                                .reshape({tokens, o.num_experts});
    choice = choice.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
  }
  r.experts = std::get<1>(choice.topk(o.top_k, -1, /*largest=*/true, /*sorted=*/true));
  r.weights = r.scores.gather(1, r.experts);
  if (o.normalize_top_k) {
    // A softmax's chosen scores are positive; a sigmoid's can underflow to 0 (DeepSeek-V3's 1e-20).
    const at::Tensor sum = r.weights.sum(-1, true);
    r.weights = r.weights / (o.score == ScoreFunction::sigmoid ? sum + 1e-20 : sum);
  }
  if (o.scaling != 1.0) r.weights = r.weights * o.scaling;
  return r;
}

}  // namespace stratum::nn::moe
