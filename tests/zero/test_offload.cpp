// ZeRO-Offload (optimizer step and, at stage 3, parameters on the host) on the tiny built-in models.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "../engine/tiny_lm_training.h"

using namespace stratum;
using namespace stratum::test::tiny_lm;

// ZeRO-Offload: the optimizer step on the host (our CPU Adam) and, at stage 3,
// the 16-bit parameter shard on the host too, train like the same stage
// without offload (fp32: 1e-5; bf16: 2e-2, the CPU Adam rounds its bf16 copy
// as the device path does).
TEST(Offload, MatchesNoOffload) {
  auto world = test::context().cpu_world;
  const std::string optimizer = R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";
  const std::string param = R"(, "offload_param": {"device": "cpu"})";
  for (const std::string precision : {"fp32", "bf16"})
    for (int stage : {1, 2, 3}) {
      Options ref_opts{"tiny-llama", {{"tie_embeddings", "false"}}, stage, 2, precision};
      TrainRun ref = train(ref_opts, world);
      std::vector<std::string> variants = {optimizer};
      if (stage == 3) variants = {optimizer, param, optimizer + param};
      for (const auto& extra : variants) {
        Options o = ref_opts;
        o.zero_extra = extra;
        TrainRun got = train(o, world);
        expect_same_training(got, ref, precision == "fp32" ? 1e-5 : 2e-2,
                             precision + " stage " + std::to_string(stage) + extra);
        // The host step ran: with 16-bit training it wrote the copy the device takes.
        const bool host_step = extra.find("offload_optimizer") != std::string::npos;
        EXPECT_EQ(got.params16, host_step && precision == "bf16") << extra;
      }
    }
}
