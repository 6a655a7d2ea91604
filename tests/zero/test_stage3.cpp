// ZeRO-3 against the plain engine, on the tiny built-in models (GPT-2 with
// tied embeddings, LLaMA untied): stage 3 at DP = 2 and 4 reproduces stage 0
// at DP = 1 (fp32: losses, gradient norms and final weights within 1e-5
// relative), with and without persistent small parameters, prefetching and
// kept layers, in 16 bits and on GPUs (there with stages 1/2 and offload too);
// per-rank model-state bytes are 16Ψ/N; the prefetch budget; forwards without
// gradients; parameters keep their identity while released.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "../engine/dp_groups.h"
#include "../engine/tiny_lm_training.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"

using namespace stratum;
using namespace stratum::test::tiny_lm;
using stratum::test::groups_of;
using stratum::test::rel_diff;

TEST(Zero3, MatchesStage0AtOneRank) {
  for (const std::string model : {"tiny-gpt2", "tiny-llama"})
    for (int gas : {1, 2}) {
      Options ref_opts{model, {{"tie_embeddings", model == "tiny-llama" ? "false" : "true"}}, 0, gas};
      TrainRun ref = train(ref_opts, groups_of(1));
      EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference must learn";
      for (const auto& [name, extra] : kStage3Variants) {
        Options o = ref_opts;
        o.stage = 3;
        o.zero_extra = extra;
        const int world = test::context().cpu_world->size();
        for (int dp = 1; dp <= world; dp *= 2) {
          TrainRun got = train(o, dp == world ? test::context().cpu_world : groups_of(dp));
          expect_same_training(got, ref, 1e-5,
                               model + " gas " + std::to_string(gas) + " dp " + std::to_string(dp) + " " + name);
          EXPECT_EQ(got.live_after, 0) << "every layer released after the step";
        }
      }
    }
}

// Born sharded: a skeleton's layers drawn one at a time by data-parallel rank
// 0 as ZeRO-3 partitions them (and, at stage 1, drawn whole by the engine)
// train exactly as the model built whole does.
TEST(Zero3, BornShardedMatchesTheModelBuiltWhole) {
  const int world = test::context().cpu_world->size();
  for (const std::string model : {"tiny-gpt2", "tiny-llama"}) {
    Options ref_opts{model, {{"tie_embeddings", model == "tiny-llama" ? "false" : "true"}}, 0, 2};
    const TrainRun ref = train(ref_opts, groups_of(1));
    for (int stage : {1, 3})
      for (int dp = 1; dp <= world; dp *= 2) {
        Options o = ref_opts;
        o.stage = stage;
        o.skeleton = true;
        const TrainRun got = train(o, dp == world ? test::context().cpu_world : groups_of(dp));
        expect_same_training(got, ref, 1e-5, model + " born sharded, stage " + std::to_string(stage) + " dp " +
                                                 std::to_string(dp));
      }
  }
}

// 16Ψ/N per rank with nothing persistent (T: the padded size); the working set
// when layers are released at once stays within the two largest layers.
TEST(Zero3, ModelStateBytesAre16PsiOverN) {
  auto world = test::context().cpu_world;
  const int64_t n = world->size();
  for (const std::string precision : {"bf16", "fp32"}) {
    Options o{"tiny-llama", {{"tie_embeddings", "false"}}, 3, 1, precision, kStage3Variants[0].second};
    TrainRun run = train(o, world, /*steps=*/1);
    EXPECT_EQ(run.bytes.total(), 16 * run.total_numel / n) << precision;
    EXPECT_NEAR(static_cast<double>(run.bytes.total()), 16.0 * run.param_numel / n, 16.0 * 8 * n) << precision;
    EXPECT_GT(run.peak_live, 0);
    EXPECT_LE(run.peak_live, 2 * run.largest_layer) << precision;
    EXPECT_LT(run.peak_live, run.total_numel) << "never the whole model";
  }
}

// DeepSpeed's prefetch rule: a budget smaller than one layer still prefetches
// the next layer (the one that crosses the budget), so the working set holds
// two layers; a budget of 0 prefetches nothing. Same training either way.
TEST(Zero3, PrefetchBudgetBelowOneLayerStillPrefetches) {
  auto world = test::context().cpu_world;
  const std::string release_at_once = R"(, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0)";
  Options none{"tiny-llama", {{"tie_embeddings", "false"}}, 3, 1, "fp32",
               release_at_once + R"(, "stage3_prefetch_bucket_size": 0)"};
  Options one = none;
  one.zero_extra = release_at_once + R"(, "stage3_prefetch_bucket_size": 1)";
  TrainRun without = train(none, world, /*steps=*/2);
  TrainRun with = train(one, world, /*steps=*/2);
  EXPECT_LE(without.peak_live, without.largest_layer) << "nothing prefetched: one layer at a time";
  EXPECT_GT(with.peak_live, without.peak_live) << "the next layer is prefetched although it exceeds the budget";
  EXPECT_LE(with.peak_live, 2 * with.largest_layer);
  expect_same_training(with, without, 1e-6, "prefetch 1 vs 0");
}

TEST(Zero3, SixteenBitMatchesStage0) {
  auto world = test::context().cpu_world;
  for (const std::string precision : {"bf16", "fp16"}) {
    Options ref_opts{"tiny-gpt2", {}, 0, 1, precision};
    TrainRun ref = train(ref_opts, world);
    Options o = ref_opts;
    o.stage = 3;
    expect_same_training(train(o, world), ref, 2e-2, precision + " stage 3 vs stage 0");
  }
}

TEST(Zero3, EvalForwardWithoutGradMatchesStage0) {
  auto world = test::context().cpu_world;
  at::Tensor tokens = at::randint(256, {2, kSeq}, at::make_generator<at::CPUGeneratorImpl>(3), at::kLong);
  std::vector<at::Tensor> logits;
  for (int stage : {0, 3}) {
    Config config = Config::from_string(config_json(Options{"tiny-gpt2", {}, stage}), "eval");
    torch::manual_seed(42);
    auto model = models::build_model(models::make_model_config("tiny-gpt2"));
    auto engine = initialize(config, model, world, c10::Device(c10::kCPU));
    c10::AutoGradMode no_grad(false);
    logits.push_back(model->logits(tokens));
    if (auto* g = engine.core().strategy().gatherer()) EXPECT_EQ(g->live_elems(), 0) << "released after the forward";
  }
  EXPECT_LE(rel_diff(logits[1], logits[0]), 1e-6);
}

// The same over NCCL on GPUs: stages 1-3 (fp32, 1e-5; bf16 2e-2, the device
// Adam's one-pass kernel against the host Adam of the offload runs) and
// ZeRO-Offload with pinned host masters and the chunked gradient copies.
TEST(Zero3, MatchesStage0OnGpus) {
  const auto& ctx = test::context();
  if (!ctx.gpu_world || ctx.gpu_world->size() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  const c10::Device gpu(c10::kCUDA, static_cast<c10::DeviceIndex>(ctx.cuda_device));
  for (const std::string precision : {"fp32", "bf16"}) {
    const double tol = precision == "fp32" ? 1e-5 : 2e-2;
    Options ref_opts{"tiny-llama", {{"tie_embeddings", "false"}}, 0, 2, precision};
    TrainRun ref = train(ref_opts, ctx.gpu_world, kSteps, gpu);
    for (const auto& [stage, extra] : std::vector<std::pair<int, std::string>>{
             {3, kStage3Variants[0].second},
             {3, kStage3Variants[1].second},
             {1, ""},
             {2, ""},
             {1, R"(, "overlap_param_gather": true)"},
             {2, R"(, "overlap_param_gather": true)"},
             {2, R"(, "offload_optimizer": {"device": "cpu"})"},
             {2, R"(, "offload_optimizer": {"device": "cpu"}, "overlap_param_gather": true)"},
             {3, R"(, "offload_optimizer": {"device": "cpu"})"},
             {3, R"(, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})"}}) {
      Options o = ref_opts;
      o.stage = stage;
      o.zero_extra = extra;
      expect_same_training(train(o, ctx.gpu_world, kSteps, gpu), ref, tol,
                           "GPU " + precision + " stage " + std::to_string(stage) + extra);
    }
  }
}

// Parameter tensors keep their identity at stage 3 (autograd and user
// references stay valid); released ones hold no storage, gathered ones do.
TEST(Zero3, ParametersKeepTheirIdentityAndAreReleasedBetweenSteps) {
  auto world = test::context().cpu_world;
  Config config = Config::from_string(config_json(Options{"tiny-gpt2", {}, 3, 1, "fp32", kStage3Variants[0].second}), "id");
  torch::manual_seed(42);
  auto model = models::build_model(models::make_model_config("tiny-gpt2"));
  std::vector<const void*> before;
  for (const auto& p : model->parameters()) before.push_back(p.unsafeGetTensorImpl());
  auto engine = initialize(config, model, world, c10::Device(c10::kCPU));
  at::Tensor tokens = at::randint(256, {2, kSeq + 1}, at::make_generator<at::CPUGeneratorImpl>(1), at::kLong);
  engine.backward(engine.forward(tokens.narrow(1, 0, kSeq), tokens.narrow(1, 1, kSeq)));
  engine.step();
  std::vector<const void*> after;
  int64_t released = 0;
  for (const auto& p : model->parameters()) {
    after.push_back(p.unsafeGetTensorImpl());
    released += p.numel() == 0;
  }
  EXPECT_EQ(before, after);
  EXPECT_GT(released, 0) << "layer parameters are released between steps";
  EXPECT_EQ(engine.core().strategy().gatherer()->live_elems(), 0);
}
