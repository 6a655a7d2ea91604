// Activation bytes a block keeps for backward on one tensor-parallel rank,
// measured on the CPU (the heap's bytes in use after the forward, less before:
// PyTorch's CPU allocator returns what it frees at once) against the
// estimator's per-block formula (planning/memory_estimator.h), which is
// Korthikanti et al.'s without dropout masks and the attention scores (flash
// attention keeps none); LLaMA with what it keeps beyond it, named below. A block's share is the difference
// between a model of 4 blocks and one of 2. GPT-2 and LLaMA at every
// tensor-parallel size of the job (1, 2, 4), with and without sequence parallelism.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <malloc.h>

#include <cstdio>

#include "../distributed/distributed_test_context.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/planning/memory_estimator.h"

using namespace stratum;

namespace {

size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

constexpr int64_t kBatch = 2, kSeq = 128;

// LLaMA with 4 key/value heads for 8 query heads: split at 2 and 4 ranks.
models::ModelConfig config_of(const std::string& preset, int64_t layers) {
  std::vector<std::pair<std::string, std::string>> o = {{"layers", std::to_string(layers)},
                                                        {"hidden", "256"},
                                                        {"heads", "8"},
                                                        {"ffn_hidden", "1024"},
                                                        {"max_seq_len", std::to_string(kSeq)}};
  if (preset == "tiny-llama") o.push_back({"kv_heads", "4"});
  return models::make_model_config(preset, o);
}

// Bytes the forward of a model of `layers` blocks leaves allocated (what backward reads).
double kept_by_forward(const std::string& preset, int64_t layers, const nn::tp::TensorParallel& tp) {
  at::manual_seed(0);
  auto model = models::build_model(config_of(preset, layers), c10::kCPU, tp);
  model->train();
  at::manual_seed(1);
  const at::Tensor tokens = at::randint(256, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor targets = at::randint(256, {kBatch, kSeq}, at::TensorOptions().dtype(at::kLong));
  model->forward(tokens, targets).backward();  // what the first step allocates for good (gradients)
  const size_t before = heap_in_use();
  at::Tensor loss = model->forward(tokens, targets);
  const size_t after = heap_in_use();
  loss.backward();  // and everything it kept is released
  return static_cast<double>(after) - static_cast<double>(before);
}

}  // namespace

TEST(TensorParallelActivations, PerBlockBytesMatchTheEstimate) {
  const auto& world = test::context().cpu_world;
  for (const std::string preset : {"tiny-gpt2", "tiny-llama"})
    for (bool sp : {false, true}) {
      if (sp && world->size() == 1) continue;
      const nn::tp::TensorParallel tp{world, sp};
      const double measured = (kept_by_forward(preset, 4, tp) - kept_by_forward(preset, 2, tp)) / 2;
      planning::EstimateInput in;
      in.tensor_parallel = tp.size();
      in.sequence_parallel = sp;
      in.micro_batch = kBatch;
      in.seq_len = kSeq;
      in.param_bytes = 4;  // fp32 on the CPU
      planning::set_model_shape(in, config_of(preset, 1));
      in.vocab = 0;  // the block alone: no loss
      // What the forward keeps: the estimate less what one block's backward adds beside it.
      double estimate = planning::estimate_activation_bytes(in) - planning::estimate_block_backward_bytes(in);
      if (preset == "tiny-llama") {
        // What LLaMA keeps beyond the formula, per token: on the CPU each
        // RMSNorm's normalized input besides its input (2 x h, or 2 x h / t of
        // the slice under sequence parallelism); on every device the query and
        // key columns of the fused q/k/v output, which v's view keeps alive
        // (h / t + kv / t).
        const double h = 256, t = static_cast<double>(tp.size()), kv = 128;
        estimate += 4.0 * kBatch * kSeq * ((sp ? 2 * h / t : 2 * h) + h / t + kv / t);
      }
      const std::string what = preset + " at tensor-parallel size " + std::to_string(tp.size()) +
                               (sp ? " with sequence parallelism" : "");
      if (world->rank() == 0)
        std::printf("[ measured ] %s: %.0f bytes a block keeps, estimate %.0f (measured / estimate %.3f)\n",
                    what.c_str(), measured, estimate, measured / estimate);
      EXPECT_NEAR(measured / estimate, 1.0, 0.05) << what << ": measured " << measured << ", estimated " << estimate;
    }
}
