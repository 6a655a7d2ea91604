#pragma once
// Text generation from a built-in model, one token at a time over the whole
// (cropped) sequence: no KV cache, meant for samples during and after
// training, not for serving.
#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/models/causal_lm.h"

namespace stratum::models {

struct GenerateOptions {
  int64_t new_tokens = 64;
  double temperature = 0.0;  // 0: greedy (argmax); else softmax(logits / temperature)
  int64_t top_k = 0;         // sample among the k most likely tokens; 0: all
  uint64_t seed = 0;         // sampling is repeatable for a given seed (own CPU generator)
};

// The prompt followed by `new_tokens` generated tokens. The model sees at most
// its last max_seq_len tokens. Runs in eval mode without autograd, and
// restores the model's training flag afterwards. Throws stratum::Error for an
// empty prompt or a token outside the vocabulary.
std::vector<int64_t> generate(CausalLMImpl& model, const std::vector<int64_t>& prompt, const GenerateOptions& options);

// The same from any source of logits (a model cut into pipeline stages):
// `next` gives the last position's logits ([vocab] fp32 on the CPU) of a
// window of tokens (int64 [1, n] on the CPU, n <= config.max_seq_len).
using NextTokenLogits = std::function<at::Tensor(const at::Tensor& tokens)>;
std::vector<int64_t> generate(const NextTokenLogits& next, const ModelConfig& config,
                              const std::vector<int64_t>& prompt, const GenerateOptions& options);

inline std::vector<int64_t> generate(CausalLMImpl& model, const std::vector<int64_t>& prompt, int64_t new_tokens,
                                     double temperature, int64_t top_k, uint64_t seed) {
  return generate(model, prompt, GenerateOptions{new_tokens, temperature, top_k, seed});
}

}  // namespace stratum::models
