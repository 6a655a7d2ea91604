// Checkpoints of the tiny built-in models across ZeRO stages: a stage-3
// checkpoint loads at stages 2 and 0 and consolidates into one 16-bit file;
// on GPUs a loaded checkpoint reaches the 16-bit parameters at every stage.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <map>

#include <nlohmann/json.hpp>

#include "../distributed/distributed_test_context.h"
#include "../engine/shared_temp_dir.h"
#include "../engine/tiny_lm_training.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/core/fs.h"
#include "stratum/engine/engine.h"
#include "stratum/io/safetensors.h"
#include "stratum/models/causal_lm.h"

using namespace stratum;
using namespace stratum::test::tiny_lm;

// On GPUs the device Adam writes the 16-bit parameters itself (stage 0: the
// model's flat buffer; stages 1/2: this rank's slices of it; stage 3: its
// 16-bit shard): a loaded checkpoint must reach those too, so the loaded
// engine's loss equals the saving engine's.
TEST(Zero3, LoadedCheckpointReachesTheModelOnGpus) {
  const auto& ctx = test::context();
  if (!ctx.gpu_world || ctx.gpu_world->size() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  const c10::Device gpu(c10::kCUDA, static_cast<c10::DeviceIndex>(ctx.cuda_device));
  auto world = ctx.gpu_world;
  const std::string dir = test::shared_temp_dir("stratum_gpu_ckpt_");
  at::Tensor tokens = at::randint(256, {8, kSeq + 1}, at::make_generator<at::CPUGeneratorImpl>(9), at::kLong).to(gpu);
  for (const auto& setting : std::vector<std::pair<int, std::string>>{
           {0, ""}, {1, ""}, {2, R"(, "overlap_param_gather": true)"}, {3, ""}}) {
    const int stage = setting.first;
    const std::string extra = setting.second;
    auto make = [&](int seed) {
      Config config = Config::from_string(config_json(Options{"tiny-gpt2", {}, stage, 1, "bf16", extra}), "ckpt");
      torch::manual_seed(seed);
      auto model = models::build_model(models::make_model_config("tiny-gpt2"));
      return std::make_pair(model, initialize(config, model, world, gpu));
    };
    auto eval_loss = [&](auto& engine) {
      c10::AutoGradMode no_grad(false);
      const int64_t m = engine.core().batch().micro_batch_per_gpu;
      at::Tensor mine = tokens.narrow(0, world->rank() * m, m);
      return engine.forward(mine.narrow(1, 0, kSeq), mine.narrow(1, 1, kSeq)).template item<double>();
    };
    auto [model, engine] = make(42);
    const int64_t m = engine.core().batch().micro_batch_per_gpu;
    for (int step = 0; step < 3; ++step) {
      at::Tensor mine = tokens.narrow(0, world->rank() * m, m);
      engine.backward(engine.forward(mine.narrow(1, 0, kSeq), mine.narrow(1, 1, kSeq)));
      engine.step();
    }
    const double want = eval_loss(engine);
    const std::string tag = "s" + std::to_string(stage);
    save_checkpoint(engine.core(), dir, tag, nlohmann::json::object());
    auto [other_model, other] = make(43);
    EXPECT_NE(eval_loss(other), want) << "stage " << stage << ": the fresh engine must start elsewhere";
    load_checkpoint(other.core(), dir, tag);
    EXPECT_NEAR(eval_loss(other), want, 1e-6 * std::abs(want)) << "stage " << stage;
  }
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_tree(dir);
}

// A stage-3 checkpoint (each rank's slices) loads at stages 2 and 0 with the
// same weights, and the consolidated 16-bit file holds every parameter whole.
TEST(Zero3, CheckpointLoadsAtOtherStagesAndConsolidates) {
  auto world = test::context().cpu_world;
  const std::string dir = test::shared_temp_dir("stratum_zero3_ckpt_");
  auto make = [&](int stage, const std::string& extra) {
    Config config = Config::from_string(config_json(Options{"tiny-gpt2", {}, stage, 1, "bf16", extra}), "ckpt");
    torch::manual_seed(stage == 3 ? 42 : 43);  // the loaded engines start from other weights
    auto model = models::build_model(models::make_model_config("tiny-gpt2"));
    return std::make_pair(model, initialize(config, model, world, c10::Device(c10::kCPU)));
  };
  auto weights_of = [](EngineCore& core) {
    std::map<std::string, at::Tensor> out;
    core.strategy().for_each_full_param(
        [&](int i, const at::Tensor& v) { out[core.strategy().layout().specs()[i].name] = v.clone(); });
    return out;
  };
  auto [model, engine] = make(3, R"(, "stage3_gather_16bit_weights_on_model_save": true)");
  at::Tensor tokens = at::randint(256, {8, kSeq + 1}, at::make_generator<at::CPUGeneratorImpl>(9), at::kLong);
  const int64_t m = engine.core().batch().micro_batch_per_gpu;
  for (int step = 0; step < 3; ++step) {
    at::Tensor mine = tokens.narrow(0, world->rank() * m, m);
    engine.backward(engine.forward(mine.narrow(1, 0, kSeq), mine.narrow(1, 1, kSeq)));
    engine.step();
  }
  save_checkpoint(engine.core(), dir, "t", nlohmann::json::object());
  const auto saved = weights_of(engine.core());
  if (world->rank() == 0) {
    auto file = io::read_safetensors(dir + "/t/model_16bit.safetensors");
    ASSERT_EQ(file.size(), saved.size());
    for (const auto& [name, value] : saved) {
      ASSERT_TRUE(file.count(name)) << name;
      EXPECT_TRUE(at::equal(file.at(name), value)) << name;
    }
  }
  for (int stage : {2, 0}) {
    auto [other_model, other] = make(stage, "");
    load_checkpoint(other.core(), dir, "t");
    for (const auto& [name, value] : weights_of(other.core()))
      EXPECT_TRUE(at::equal(value, saved.at(name))) << "stage " << stage << " " << name;
  }
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_tree(dir);
}
