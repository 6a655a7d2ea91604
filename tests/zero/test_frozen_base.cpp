// ZeRO-3 over a frozen base (LoRA, QLoRA: zero/frozen_units.h) against
// ZeRO-2, which keeps the base whole on every rank: at DP = 2 and 4 the
// losses and gradient norms match within 1e-5 relative (fp32), for a dense
// base and an NF4 one, with and without activation checkpointing, drawn by
// name or loaded from a state dict; a rank holds 1/N of the base's bytes,
// never more than two layers of it whole at once (the running one and the
// one gathered ahead), and none between steps.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../distributed/distributed_test_context.h"
#include "../engine/dp_groups.h"
#include "stratum/checkpoint/load_weights.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/lora.h"
#include "stratum/nn/parameter_modules.h"

using namespace stratum;
using stratum::test::groups_of;

namespace {

constexpr int64_t kBatch = 8, kGas = 2, kSeq = 16;

struct BaseRun {
  std::vector<double> losses, grad_norms;
  bool partitioned = false;
  int64_t held = 0, whole = 0, peak_live = 0;
  int64_t frozen_bytes_left = 0;  // frozen bytes bound between steps (0: all released)
};

// The frozen weights' bytes the model holds now: dense tensors and NF4 codes and scales.
int64_t frozen_bytes_bound(models::CausalLMImpl& model) {
  int64_t n = 0;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    auto* linear = dynamic_cast<nn::LinearImpl*>(m.get());
    if (linear && linear->nf4) n += linear->nf4->packed.nbytes() + linear->nf4->absmax.nbytes();
  }
  for (const auto& p : model.parameters())
    if (!p.requires_grad() && !nn::is_unmaterialized(p)) n += p.nbytes();
  return n;
}

// Values for every frozen parameter, the same on every rank (norm scales near 1).
std::map<std::string, at::Tensor> base_values(models::CausalLMImpl& model) {
  std::map<std::string, at::Tensor> out;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2024);
  for (const auto& item : model.named_parameters()) {
    if (item.value().requires_grad()) continue;
    at::Tensor v = at::randn(item.value().sizes(), gen) * 0.05;
    out[item.key()] = item.value().dim() == 1 ? v + 1 : v;
  }
  return out;
}

BaseRun train_lora(int stage, const std::string& base, bool checkpointing, bool load,
                   const std::shared_ptr<distributed::Communicator>& dp) {
  const std::string ac = checkpointing ? R"("activation_checkpointing": {},)" : "";
  Config config = Config::from_string(
      R"({"train_batch_size": )" + std::to_string(kBatch) + R"(, "gradient_accumulation_steps": )" +
          std::to_string(kGas) + ", " + ac + R"(
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "zero_optimization": {"stage": )" + std::to_string(stage) + R"(, "stage3_prefetch_bucket_size": 1},
      "lora": {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "base_dtype": ")" + base + R"("}})",
      "frozen-base-test");
  torch::manual_seed(42);  // the skeleton's draws follow it
  auto model = models::construct_model(
      models::make_model_config("tiny-llama", {{"tie_embeddings", "false"}, {"layers", "3"}}), {}, c10::kMeta);
  models::apply_lora(*model, config.lora);
  const std::map<std::string, at::Tensor> values = load ? base_values(*model) : std::map<std::string, at::Tensor>{};
  auto engine = initialize(config, model, dp, c10::kCPU);
  if (load)
    load_frozen_weights(*model, nullptr, values, *dp, c10::kCPU, "loading the test base", {},
                        engine.core().frozen_units());
  BaseRun run;
  if (const zero::FrozenUnits* f = engine.core().frozen_units()) {
    run.partitioned = true;
    run.held = f->held_bytes();
    run.whole = f->whole_bytes();
  }
  test::train_steps(engine, 0, 4, kBatch, kGas, kSeq, run.losses, run.grad_norms);
  if (const zero::FrozenUnits* f = engine.core().frozen_units()) run.peak_live = f->peak_live_bytes();
  run.frozen_bytes_left = frozen_bytes_bound(*model);
  return run;
}

}  // namespace

TEST(Zero3FrozenBase, PartitionedBaseTrainsAsTheWholeBaseOfZero2) {
  const int world = test::context().cpu_world->size();
  for (int n : {2, 4}) {
    if (n > world) continue;
    const auto dp = groups_of(n);
    for (const std::string base : {"model", "nf4"})
      for (bool checkpointing : {false, true})
        for (bool load : {false, true}) {
          const std::string what = "DP " + std::to_string(n) + ", base " + base +
                                   (checkpointing ? ", checkpointing" : "") + (load ? ", loaded" : ", drawn");
          const BaseRun whole = train_lora(2, base, checkpointing, load, dp);
          const BaseRun parts = train_lora(3, base, checkpointing, load, dp);
          EXPECT_FALSE(whole.partitioned) << what;
          ASSERT_TRUE(parts.partitioned) << what;
          ASSERT_EQ(parts.losses.size(), whole.losses.size());
          EXPECT_LT(whole.losses.back(), whole.losses.front()) << what << ": the adapters must learn";
          for (size_t i = 0; i < whole.losses.size(); ++i) {
            EXPECT_NEAR(parts.losses[i], whole.losses[i], 1e-5 * whole.losses[i]) << what << ", step " << i;
            EXPECT_NEAR(parts.grad_norms[i], whole.grad_norms[i], 1e-5 * whole.grad_norms[i]) << what << ", step " << i;
          }
          // 1/N of the bytes (each tensor aligned to 16 bytes, each layer to 16 a rank), none bound between steps.
          EXPECT_GE(parts.held * n, parts.whole) << what;
          EXPECT_LE(parts.held, parts.whole / n + 1024) << what;
          EXPECT_EQ(parts.frozen_bytes_left, 0) << what;
          EXPECT_GT(whole.frozen_bytes_left, 0) << what;
          // The 3 blocks, the embedding and the head: never more than two of them gathered at once.
          EXPECT_GT(parts.peak_live, 0) << what;
          EXPECT_LT(parts.peak_live, parts.whole * 3 / 4) << what;
        }
  }
}
