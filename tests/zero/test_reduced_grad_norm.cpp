// The gradient norm the ZeRO strategies take from their reductions.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "../engine/tiny_lm_training.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"
#include "stratum/optim/grad_clip.h"

using namespace stratum;
using namespace stratum::test::tiny_lm;

// The clipping norm taken from the reductions (on GPUs on a side stream as
// each lands; on the CPU piece by piece at the step): it equals the norm of
// the reduced gradients at every stage, and it is not offered where a
// reduction's result is scaled, rounded or accumulated after it lands
// (predivide factor; stage 3's 16-bit gradient shard; stage 2 accumulating
// over micro-steps), so the engine computes the norm itself there.
TEST(Zero3, GradNormFromReductions) {
  if (test::context().cpu_world->size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  struct Case {
    int stage, gas;
    std::string precision, extra;
    bool offered;
    std::string top_extra;
  };
  const std::vector<Case> cases = {{0, 1, "fp32", "", true},
                                   {1, 1, "fp32", "", true},
                                   {2, 1, "fp32", "", true},
                                   {3, 1, "fp32", "", true},
                                   {3, 1, "fp32", kStage3Variants[0].second, true},
                                   {3, 1, "fp32", kStage3Variants[2].second, true},
                                   {0, 2, "bf16", "", true},
                                   {1, 1, "bf16", "", true},
                                   {2, 1, "bf16", R"(, "overlap_param_gather": true)", true},
                                   {3, 1, "bf16", "", false},
                                   {0, 1, "fp32", "", false, R"("gradient_predivide_factor": 2.0,)"},
                                   {2, 2, "fp32", "", false}};
  for (const auto& backend : test::backends()) {
    if (backend.world->size() < 2) continue;
    for (const Case& c : cases) {
      const std::string what = backend.name + " stage " + std::to_string(c.stage) + " gas " +
                               std::to_string(c.gas) + " " + c.precision + c.extra + c.top_extra;
      Options o{"tiny-llama", {{"tie_embeddings", "false"}}, c.stage, c.gas, c.precision, c.extra, "", c.top_extra};
      Config config = Config::from_string(config_json(o), "zero3-test");
      torch::manual_seed(42);
      auto engine = initialize(config, models::build_model(models::make_model_config(o.model, o.overrides)),
                               backend.world, backend.device);
      auto& strategy = engine.core().strategy();
      const int64_t m = engine.core().batch().micro_batch_per_gpu;
      const auto token_opts = torch::TensorOptions().dtype(torch::kLong).device(backend.device);
      for (int step = 0; step < 2; ++step) {
        for (int k = 0; k < c.gas; ++k) {
          at::Tensor tokens = torch::randint(256, {m, kSeq + 1}, token_opts);
          engine.backward(engine.forward(tokens.narrow(1, 0, kSeq), tokens.narrow(1, 1, kSeq)));
          if (k + 1 < c.gas) engine.step();
        }
        strategy.wait_gradients();
        const at::Tensor got = strategy.reduced_grad_sq_norm();
        ASSERT_EQ(got.defined(), c.offered) << what;
        if (got.defined()) {
          std::vector<at::Tensor> grads;
          for (const auto& s : strategy.segments()) grads.push_back(s.grad);
          const double want = optim::squared_norm(grads).item<double>();
          EXPECT_GT(want, 0.0) << what;
          EXPECT_LE(std::abs(got.item<double>() - want) / want, 1e-5) << what << " step " << step;
        }
        engine.step();  // the engine computes the norm itself now: it was taken
      }
    }
  }
}
