#pragma once
// The router of a mixture-of-experts layer: which top_k of num_experts
// experts each token goes to, and with what weight.
//
//   scores  = softmax(logits) (Mixtral, Qwen3-MoE) or sigmoid(logits)
//             (DeepSeek-V3), in fp32 whatever the logits' dtype;
//   choice  = the top_k of scores + bias (the bias of aux-loss-free
//             balancing: it moves the choice, never the weights), among the
//             experts of the top_groups best groups when the experts are cut
//             into `groups` (DeepSeek-V3's group-limited routing: a group's
//             score is the sum of its two best experts');
//   weights = the chosen experts' scores, divided by their sum when
//             normalize_top_k, times `scaling` (routed_scaling_factor).
// Ties go to the lower expert index, as torch.topk's.
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace stratum::nn::moe {

enum class ScoreFunction { softmax, sigmoid };
// "softmax" | "sigmoid"; throws stratum::Error naming the text otherwise.
ScoreFunction score_function(const std::string& name);
const char* score_function_name(ScoreFunction f);

struct RouterOptions {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  ScoreFunction score = ScoreFunction::softmax;
  bool normalize_top_k = true;
  int64_t groups = 1;      // experts cut into this many groups (1: no group limit)
  int64_t top_groups = 1;  // of which a token may use the best this many
  double scaling = 1.0;
};

// Throws stratum::Error naming each problem: top_k outside [1, num_experts],
// groups not dividing num_experts, top_groups outside [1, groups], too few
// experts in the top groups for top_k.
void check(const RouterOptions& options);

struct Routing {
  at::Tensor experts;  // int64 [tokens, top_k]: the chosen experts
  at::Tensor weights;  // fp32 [tokens, top_k]: their weights (differentiable)
  at::Tensor scores;   // fp32 [tokens, num_experts]: every expert's score (differentiable)
};

// `logits`: [tokens, num_experts], any float dtype; `bias`: [num_experts] or undefined.
Routing route(const at::Tensor& logits, const at::Tensor& bias, const RouterOptions& options);

}  // namespace stratum::nn::moe
