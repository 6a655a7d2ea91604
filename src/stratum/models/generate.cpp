#include "stratum/models/generate.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>

#include "stratum/core/error.h"
#include "stratum/core/heartbeat.h"

namespace stratum::models {

namespace {

// The next token from the last position's logits (fp32, on the CPU).
int64_t pick(at::Tensor logits, const GenerateOptions& o, at::Generator& gen) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    const at::Tensor kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(logits.softmax(-1), 1, /*replacement=*/false, gen).item<int64_t>();
}

}  // namespace

std::vector<int64_t> generate(const NextTokenLogits& next, const ModelConfig& c, const std::vector<int64_t>& prompt,
                              const GenerateOptions& o) {
  if (prompt.empty()) throw Error("generate: the prompt is empty");
  for (int64_t t : prompt)
    if (t < 0 || t >= c.vocab_size)
      throw Error("generate: prompt token " + std::to_string(t) + " is outside the vocabulary [0, " +
                  std::to_string(c.vocab_size) + ")");
  if (o.new_tokens < 0) throw Error("generate: new_tokens is negative");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  std::vector<int64_t> tokens = prompt;
  for (int64_t i = 0; i < o.new_tokens; ++i) {
    heartbeat::beat();  // generating after training is progress too (stratum-run's --heartbeat_timeout)
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), c.max_seq_len);
    const at::Tensor input = at::tensor(std::vector<int64_t>(tokens.end() - n, tokens.end()), at::kLong).view({1, n});
    const at::Tensor last = next(input);
    if (last.dim() != 1 || last.size(0) < c.vocab_size)
      throw Error("generate: the logits of the last position have shape " + c10::str(last.sizes()) +
                  ", expected [" + std::to_string(c.vocab_size) + "]");
    tokens.push_back(pick(last.narrow(0, 0, c.vocab_size), o, gen));
  }
  return tokens;
}

std::vector<int64_t> generate(CausalLMImpl& model, const std::vector<int64_t>& prompt, const GenerateOptions& o) {
  const bool was_training = model.is_training();
  model.eval();
  c10::AutoGradMode no_grad(false);
  const c10::Device device = model.parameters().front().device();
  try {
    std::vector<int64_t> tokens = generate(
        [&](const at::Tensor& input) {
          const int64_t n = input.size(1);
          return model.logits(input.to(device)).select(1, n - 1).squeeze(0).to(at::kFloat).cpu();
        },
        model.config(), prompt, o);
    model.train(was_training);
    return tokens;
  } catch (...) {
    model.train(was_training);
    throw;
  }
}

}  // namespace stratum::models
