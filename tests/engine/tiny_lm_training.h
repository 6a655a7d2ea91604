#pragma once
// Trains the tiny built-in models (GPT-2 with tied embeddings, LLaMA untied)
// through the engine under a ds_config made from Options, and records what the
// ZeRO and engine tests compare: losses, gradient norms, final weights,
// per-rank model-state bytes and stage 3's working set.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dp_groups.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"

namespace stratum::test::tiny_lm {

inline constexpr int kGlobalBatch = 8;
inline constexpr int kSeq = 16;
inline constexpr int kSteps = 6;

struct Options {
  std::string model = "tiny-gpt2";
  std::vector<std::pair<std::string, std::string>> overrides;
  int stage = 0;
  int gas = 1;
  std::string precision = "fp32";
  std::string zero_extra;  // more zero_optimization keys, e.g. ", \"stage3_prefetch_bucket_size\": 0"
  std::string checkpointing;  // an activation_checkpointing section, or empty
  std::string top_extra;      // more top-level keys, each followed by a comma
  std::string optimizer;      // the "optimizer" section, or empty for the AdamW below
  bool skeleton = false;      // born sharded: the engine draws the parameters (nn/deferred_init.h)
};

inline std::string config_json(const Options& o) {
  std::string prec = o.precision == "bf16"   ? R"("bf16": {"enabled": true},)"
                     : o.precision == "fp16" ? R"("fp16": {"enabled": true, "initial_scale_power": 8},)"
                                             : "";
  std::string ac = o.checkpointing.empty() ? "" : R"("activation_checkpointing": )" + o.checkpointing + ",";
  return R"({"train_batch_size": )" + std::to_string(kGlobalBatch) + R"(, "gradient_accumulation_steps": )" +
         std::to_string(o.gas) + "," + prec + ac + o.top_extra + R"(
    "optimizer": )" + (o.optimizer.empty() ? R"({"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01, "eps": 1e-4}})"
                                           : o.optimizer) + R"(,
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": )" + std::to_string(o.stage) + R"(, "reduce_bucket_size": 5000)" + o.zero_extra +
         "}}";
}

// Adam's eps is raised to 1e-4 because GPT-2's key bias gets only rounding
// noise as gradient (softmax ignores it): with eps 1e-8 Adam turns that noise
// into lr-sized steps that differ between any two summation orders.
struct TrainRun {
  std::vector<double> losses, grad_norms;
  at::Tensor weights;  // every parameter, in registration order, fp32
  ModelStateBytes bytes;
  int64_t param_numel = 0, total_numel = 0;
  int64_t peak_live = 0, live_after = 0, largest_layer = 0;
  bool params16 = false;  // the optimizer step wrote a 16-bit host copy (offload)
  bool layer_runner = false;  // the strategy has per-layer work (stage 3; stages 1/2 with overlap_param_gather)
};

inline TrainRun train(const Options& o, const std::shared_ptr<distributed::Communicator>& dp, int steps = kSteps,
                      c10::Device device = c10::Device(c10::kCPU)) {
  Config config = Config::from_string(config_json(o), "zero3-test");
  torch::manual_seed(42);
  const auto model_config = models::make_model_config(o.model, o.overrides);
  auto model = o.skeleton ? models::construct_model(model_config, {}, c10::kMeta) : models::build_model(model_config);
  auto engine = initialize(config, model, dp, device);
  const auto& b = engine.core().batch();
  const int n = dp->size(), r = dp->rank();
  const int64_t m = b.micro_batch_per_gpu;
  torch::manual_seed(7 + r);  // dropout masks: per rank, the same in every run at this rank
  TrainRun run;
  for (int step = 0; step < steps; ++step) {
    // One batch, seen again every step: the model must learn it.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1000);
    at::Tensor tokens = at::randint(256, {kGlobalBatch, kSeq + 1}, gen, at::TensorOptions().dtype(at::kLong)).to(device);
    double local = 0;
    for (int k = 0; k < b.gradient_accumulation_steps; ++k) {
      at::Tensor mine = tokens.narrow(0, (k * n + r) * m, m);
      at::Tensor loss = engine.forward(mine.narrow(1, 0, kSeq), mine.narrow(1, 1, kSeq));
      engine.backward(loss);
      engine.step();
      local += loss.item<double>() / b.gradient_accumulation_steps;
    }
    at::Tensor l = torch::full({1}, local, torch::kDouble).to(device);
    dp->all_reduce(l, distributed::ReduceOp::avg)->wait();
    run.losses.push_back(l.item<double>());
    run.grad_norms.push_back(engine.core().last_grad_norm());
  }
  auto& strategy = engine.core().strategy();
  std::vector<at::Tensor> flat(strategy.layout().params().size());
  strategy.for_each_full_param([&](int i, const at::Tensor& v) { flat[i] = v.to(at::kFloat).reshape(-1).clone(); });
  run.weights = torch::cat(flat);
  run.bytes = engine.core().model_state_bytes();
  run.param_numel = strategy.layout().param_numel();
  run.total_numel = strategy.layout().total_numel();
  if (auto* g = strategy.gatherer()) {
    run.peak_live = g->peak_live_elems();
    run.live_after = g->live_elems();
  }
  run.params16 = strategy.segments().front().params16.defined();
  run.layer_runner = strategy.gatherer() != nullptr;
  for (const auto& bucket : strategy.layout().buckets()) run.largest_layer = std::max(run.largest_layer, bucket.numel);
  return run;
}

inline void expect_same_training(const TrainRun& got, const TrainRun& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]), tol)
        << what << ": loss at step " << i << " " << got.losses[i] << " vs " << ref.losses[i];
    EXPECT_LE(std::abs(got.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i], tol)
        << what << ": gradient norm at step " << i << " " << got.grad_norms[i] << " vs " << ref.grad_norms[i];
  }
  ASSERT_EQ(got.weights.numel(), ref.weights.numel()) << what;
  EXPECT_LE(rel_diff(got.weights, ref.weights), tol) << what << ": final weights";
}

// Stage-3 settings that exercise different paths: everything partitioned and
// released at once; small parameters persistent with prefetching and layers
// kept for backward (DeepSpeed's defaults); a live-parameter cap.
inline const std::vector<std::pair<std::string, std::string>> kStage3Variants = {
    {"no persistence, no prefetch, release at once",
     R"(, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0)"},
    {"defaults (persistent small params, prefetch, keep)", ""},
    {"live cap", R"(, "stage3_param_persistence_threshold": 100, "stage3_max_live_parameters": 30000,
                    "stage3_prefetch_bucket_size": 20000, "stage3_max_reuse_distance": 40000)"},
};

}  // namespace stratum::test::tiny_lm
