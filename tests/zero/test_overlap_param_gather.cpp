// overlap_param_gather at ZeRO stages 1/2: the parameter all-gathers after a
// step are waited for layer by layer in the next forward, on the tiny built-in
// models; training equals stage 0's at one rank, and engine.module() shows the
// final parameters.
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

// Stages 1/2 with overlap_param_gather: the parameter all-gathers after each
// step are waited for layer by layer in the next forward (GPT-2's tied
// embedding by the LM head too), with layers spread over several 5000-element
// buckets; training is stage 0's at one rank.
TEST(OverlapParamGather, MatchesStage0) {
  const int world = test::context().cpu_world->size();
  for (const std::string model : {"tiny-gpt2", "tiny-llama"})
    for (int gas : {1, 2}) {
      Options ref_opts{model, {{"tie_embeddings", model == "tiny-llama" ? "false" : "true"}}, 0, gas};
      TrainRun ref = train(ref_opts, groups_of(1));
      for (int stage : {1, 2})
        for (int dp = 1; dp <= world; dp *= 2) {
          Options o = ref_opts;
          o.stage = stage;
          o.zero_extra = R"(, "overlap_param_gather": true)";
          TrainRun got = train(o, dp == world ? test::context().cpu_world : groups_of(dp));
          const std::string what = model + " gas " + std::to_string(gas) + " stage " + std::to_string(stage) + " dp " +
                                   std::to_string(dp);
          expect_same_training(got, ref, 1e-5, what);
          EXPECT_TRUE(got.layer_runner) << what << ": the waits must be left to the layers";
        }
    }
}

// With overlap_param_gather the gathers of the last step are still in flight
// after step(); engine.module() waits for them, so what it shows is final.
TEST(OverlapParamGather, ModuleShowsTheFinalParameters) {
  auto world = test::context().cpu_world;
  std::vector<at::Tensor> seen;
  for (const std::string extra : {std::string(""), std::string(R"(, "overlap_param_gather": true)")}) {
    Config config = Config::from_string(config_json(Options{"tiny-gpt2", {}, 2, 1, "fp32", extra}), "module");
    torch::manual_seed(42);
    auto model = models::build_model(models::make_model_config("tiny-gpt2"));
    auto engine = initialize(config, model, world, c10::Device(c10::kCPU));
    const int64_t m = engine.core().batch().micro_batch_per_gpu;
    at::Tensor tokens = at::randint(256, {m, kSeq + 1}, at::make_generator<at::CPUGeneratorImpl>(5), at::kLong);
    for (int step = 0; step < 2; ++step) {
      engine.backward(engine.forward(tokens.narrow(1, 0, kSeq), tokens.narrow(1, 1, kSeq)));
      engine.step();
    }
    std::vector<at::Tensor> flat;
    for (const auto& p : engine.module().parameters()) flat.push_back(p.detach().reshape(-1).clone());
    seen.push_back(torch::cat(flat));
  }
  EXPECT_TRUE(torch::equal(seen[1], seen[0]));
}
