#pragma once
// Training FLOPs a token, forward and backward, without recomputation: the one
// count behind every MFU Stratum reports (stratum-train's progress line, the
// benchmarks, the layout planner). A parameter's multiply-add is 2 FLOPs in
// the forward and 4 in the backward; attention's scores and weighted sum add
// 12 x hidden x sequence a layer (Megatron's and PaLM's count).
#include <cstdint>

#include "stratum/models/model_config.h"

namespace stratum::models {

inline constexpr double kTrainingFlopsPerParameter = 6.0;

// One layer's attention, a token.
inline double attention_training_flops(int64_t hidden, int64_t seq_len) {
  return 12.0 * static_cast<double>(hidden) * static_cast<double>(seq_len);
}

// `parameters` trainable parameters (a tied matrix once), `layers` blocks.
inline double training_flops_per_token(double parameters, int64_t layers, int64_t hidden, int64_t seq_len) {
  return kTrainingFlopsPerParameter * parameters + static_cast<double>(layers) * attention_training_flops(hidden, seq_len);
}

// A mixture of experts counts the parameters a token runs through (its top_k
// experts: active_parameter_count); attention, the heads' width (Qwen3's
// heads x head_dim is not hidden).
inline double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  return training_flops_per_token(static_cast<double>(active_parameter_count(c)), c.layers, c.heads * c.head_dim(),
                                  seq_len);
}

}  // namespace stratum::models
