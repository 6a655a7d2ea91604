// How the engine runs a LayerStack's layers: activation checkpointing
// recomputes the chosen blocks in backward and trains exactly like stored
// activations (dropout on: the RNG replay matters), at stage 0 and with ZeRO;
// which layers it chooses; a model that is not a LayerStack is refused.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "mlp.h"
#include "tiny_lm_training.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/layer_runner.h"
#include "stratum/models/causal_lm.h"

using namespace stratum;
using namespace stratum::test::tiny_lm;

// Recomputing the blocks in backward (dropout on, so the RNG must be replayed)
// trains exactly like keeping their activations: at stage 0 and at stage 3,
// with the layer inputs on the host or not, all blocks or only the first.
TEST(ActivationCheckpointing, SameTrainingAsStoredActivations) {
  auto world = test::context().cpu_world;
  for (const std::string model : {"tiny-gpt2", "tiny-llama"}) {
    Options ref_opts{model, {{"dropout", "0.2"}}, 0, 2};
    TrainRun ref = train(ref_opts, world);
    for (int stage : {0, 2, 3})
      for (const std::string ac :
           {R"({})", R"({"cpu_checkpointing": true})", R"({"number_checkpoints": 1})",
            R"({"contiguous_memory_optimization": true, "synchronize_checkpoint_boundary": true, "profile": true})",
            R"({"contiguous_memory_optimization": true, "cpu_checkpointing": true})",
            R"({"contiguous_memory_optimization": true, "cpu_checkpointing": true, "cpu_checkpointing_layers": 1})"}) {
        Options o = ref_opts;
        o.stage = stage;
        o.checkpointing = ac;
        expect_same_training(train(o, world), ref, 1e-5, model + " stage " + std::to_string(stage) + " checkpointing " + ac);
      }
  }
}

// Which layers activation checkpointing recomputes: the repeated ones (the
// blocks), all or the first number_checkpoints; none without the section.
TEST(ActivationCheckpointing, ChoosesTheRepeatedLayers) {
  auto model = models::build_model(models::make_model_config("tiny-gpt2", {{"layers", "3"}}));
  ASSERT_EQ(model->size(), 6u);  // embedding, 3 blocks, final norm, LM head
  config::ActivationCheckpointingConfig ac;
  EXPECT_EQ(checkpointed_layers(*model, ac), std::vector<bool>(6, false));
  ac.enabled = true;
  EXPECT_EQ(checkpointed_layers(*model, ac), (std::vector<bool>{false, true, true, true, false, false}));
  ac.number_checkpoints = 2;
  EXPECT_EQ(checkpointed_layers(*model, ac), (std::vector<bool>{false, true, true, false, false, false}));
}

// cpu_checkpointing's inputs on the host: every checkpointed block's, or the
// first cpu_checkpointing_layers' (more than there are: all); none without it.
TEST(ActivationCheckpointing, KeepsTheFirstBlocksInputsOnTheHost) {
  const std::vector<bool> checkpointed{false, true, true, true, false, false};
  config::ActivationCheckpointingConfig ac;
  ac.enabled = true;
  EXPECT_EQ(host_checkpointed_layers(checkpointed, ac), std::vector<bool>(6, false));
  ac.cpu_checkpointing = true;
  EXPECT_EQ(host_checkpointed_layers(checkpointed, ac), checkpointed);
  ac.cpu_checkpointing_layers = 2;
  EXPECT_EQ(host_checkpointed_layers(checkpointed, ac), (std::vector<bool>{false, true, true, false, false, false}));
  ac.cpu_checkpointing_layers = 0;
  EXPECT_EQ(host_checkpointed_layers(checkpointed, ac), std::vector<bool>(6, false));
  ac.cpu_checkpointing_layers = 9;
  EXPECT_EQ(host_checkpointed_layers(checkpointed, ac), checkpointed);

  // The engine's runner follows it, with a buffer of its own for the host's
  // inputs under contiguous_memory_optimization.
  ac.cpu_checkpointing_layers = 1;
  ac.contiguous_memory_optimization = true;
  EngineLayerRunner runner(nullptr, nullptr, checkpointed, ac);
  EXPECT_EQ(runner.host_checkpointed(), (std::vector<bool>{false, true, false, false, false, false}));
  EXPECT_NE(runner.contiguous_inputs(), nullptr);
  EXPECT_NE(runner.contiguous_host_inputs(), nullptr);
}

TEST(Zero3, ModelThatIsNotALayerStackIsAClearError) {
  auto world = test::context().cpu_world;
  for (const std::string section : {R"("zero_optimization": {"stage": 3})", R"("activation_checkpointing": {})"}) {
    Config config = Config::from_string(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"}, )" + section + "}",
                                        "z3.json");
    try {
      initialize(config, test::Mlp().ptr(), world, torch::kCPU);
      ADD_FAILURE() << "accepted " << section;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("stratum::nn::LayerStack"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("z3.json"), std::string::npos) << e.what();
    }
  }
  world->barrier()->wait();
}
