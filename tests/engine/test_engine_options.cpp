// ds_config options the engine acts on beyond the step itself:
// ignore_unused_parameters, the comms logger around the engine's data-parallel
// communicator, and activation checkpointing's contiguous buffer.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "mlp.h"
#include "tiny_lm_training.h"
#include "stratum/distributed/logged_communicator.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/layer_runner.h"
#include "stratum/models/causal_lm.h"

using namespace stratum;

namespace {

// An MLP with a parameter its forward never uses.
struct WithUnusedImpl : torch::nn::Module {
  WithUnusedImpl() {
    fc = register_module("fc", torch::nn::Linear(16, 4));
    spare = register_parameter("spare", torch::zeros({8}));
  }
  at::Tensor forward(const at::Tensor& x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
  at::Tensor spare;
};
TORCH_MODULE(WithUnused);

Config config_with(const std::string& extra) {
  return Config::from_string(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}, )" + extra + "}",
                             "options.json");
}

template <class Engine>
void one_step(Engine& engine, c10::Device device = c10::kCPU) {
  torch::manual_seed(3);
  at::Tensor loss = engine.forward(torch::randn({2, 16}).to(device)).pow(2).mean();
  engine.backward(loss);
  engine.step();
}

}  // namespace

// DeepSpeed's default trains an unused parameter with a zero gradient; false
// makes it an error that names the parameter, at every stage.
TEST(EngineOptions, IgnoreUnusedParametersFalseNamesTheParameterWithoutAGradient) {
  auto world = test::context().cpu_world;
  for (int stage : {0, 1, 2}) {
    const std::string zero = R"("zero_optimization": {"stage": )" + std::to_string(stage);
    auto lenient = initialize(config_with(zero + "}"), WithUnused().ptr(), world, torch::kCPU);
    EXPECT_NO_THROW(one_step(lenient)) << "stage " << stage;
    auto strict = initialize(config_with(zero + R"(, "ignore_unused_parameters": false})"), WithUnused().ptr(), world,
                             torch::kCPU);
    try {
      one_step(strict);
      ADD_FAILURE() << "stage " << stage << ": an unused parameter was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("ignore_unused_parameters is false"), std::string::npos) << what;
      EXPECT_NE(what.find("1 trainable parameter got no gradient"), std::string::npos) << what;
      EXPECT_NE(what.find(": spare;"), std::string::npos) << what;
    }
  }
  // A model whose parameters all get gradients trains under the strict setting.
  auto all_used = initialize(config_with(R"("zero_optimization": {"stage": 2, "ignore_unused_parameters": false})"),
                             test::Mlp().ptr(), world, torch::kCPU);
  EXPECT_NO_THROW(one_step(all_used));
}

// comms_logger.enabled: the engine's data-parallel communicator records every
// collective of training, and the summary is DeepSpeed's table.
TEST(EngineOptions, CommsLoggerRecordsTheEnginesCollectives) {
  const auto& ctx = test::context();
  auto engine = initialize(config_with(R"("zero_optimization": {"stage": 2}, "comms_logger": {"enabled": true})"),
                           test::Mlp().ptr(), ctx);
  auto* logged = dynamic_cast<distributed::LoggedCommunicator*>(engine.core().dp().get());
  ASSERT_NE(logged, nullptr) << "the engine's communicator is not logged";
  logged->comms_log()->reset();
  one_step(engine, ctx.gpu_world ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(ctx.cuda_device))
                                 : c10::Device(c10::kCPU));
  if (ctx.world_size > 1) {
    EXPECT_GT(logged->comms_log()->total_count(), 0) << "stage 2 reduce-scatters and all-gathers over 2+ ranks";
    const std::string summary = logged->comms_log()->summary();
    EXPECT_NE(summary.find("Comm. Op"), std::string::npos) << summary;
    EXPECT_NE(summary.find("reduce_scatter"), std::string::npos) << summary;
  }
  // Off: the communicator is the context's own, unwrapped.
  auto plain = initialize(config_with(R"("zero_optimization": {"stage": 2})"), test::Mlp().ptr(), ctx);
  EXPECT_EQ(dynamic_cast<distributed::LoggedCommunicator*>(plain.core().dp().get()), nullptr);
}

// contiguous_memory_optimization: every step's saved layer inputs go into one
// buffer, allocated once, and training is the same as without it.
TEST(EngineOptions, ContiguousCheckpointInputsReuseOneBuffer) {
  auto world = test::context().cpu_world;
  Config config = Config::from_string(test::tiny_lm::config_json(
                                          {"tiny-gpt2", {}, 0, 2, "fp32", "",
                                           R"({"contiguous_memory_optimization": true, "profile": true,
                                               "synchronize_checkpoint_boundary": true})"}),
                                      "contiguous.json");
  torch::manual_seed(42);
  auto model = models::build_model(models::make_model_config("tiny-gpt2", {}));
  auto engine = initialize(config, model, world, torch::kCPU);
  auto* runner = dynamic_cast<EngineLayerRunner*>(model->runner().get());
  ASSERT_NE(runner, nullptr);
  ASSERT_NE(runner->contiguous_inputs(), nullptr);
  at::Tensor tokens = at::randint(256, {4, 17}, at::TensorOptions().dtype(at::kLong));
  for (int step = 0; step < 3; ++step) {
    at::Tensor loss = engine.forward(tokens.narrow(1, 0, 16), tokens.narrow(1, 1, 16));
    engine.backward(loss);
    engine.step();
  }
  EXPECT_EQ(runner->contiguous_inputs()->allocations(), 1) << "one buffer for every step's checkpointed inputs";
}

// A buffer a graph still holds is not overwritten: the next forward takes a new one.
TEST(EngineOptions, ContiguousCheckpointInputsNeverOverwriteAHeldBuffer) {
  ContiguousCheckpointInputs inputs(2);
  inputs.begin_forward();
  at::Tensor a = inputs.store(torch::full({3}, 1.0f));
  at::Tensor b = inputs.store(torch::full({3}, 2.0f));
  EXPECT_EQ(inputs.allocations(), 1);
  EXPECT_EQ(b.data_ptr<float>(), a.data_ptr<float>() + 3) << "slots are contiguous";
  inputs.begin_forward();
  at::Tensor c = inputs.store(torch::full({3}, 3.0f));  // a and b still alive
  EXPECT_EQ(inputs.allocations(), 2);
  EXPECT_EQ(a[0].item<float>(), 1.0f);
  EXPECT_EQ(c[0].item<float>(), 3.0f);
  a = b = c = at::Tensor();
  inputs.begin_forward();
  inputs.store(torch::full({3}, 4.0f));
  EXPECT_EQ(inputs.allocations(), 2) << "a released buffer is reused";
  at::Tensor other = inputs.store(torch::full({5}, 5.0f));
  EXPECT_EQ(other.numel(), 5) << "an input of another shape is kept as it is";
}

// data_types.grad_accum_dtype "fp32": bf16 training keeps its gradients in fp32
// at every data-parallel size (without it, one rank keeps them in bf16).
TEST(EngineOptions, GradAccumDtypeFp32KeepsGradientsInFp32) {
  auto world = test::context().cpu_world;
  for (int stage : {0, 1, 2}) {
    const std::string zero = R"("bf16": {"enabled": true}, "zero_optimization": {"stage": )" + std::to_string(stage) + "}";
    auto fp32 = initialize(config_with(zero + R"(, "data_types": {"grad_accum_dtype": "fp32"})"), test::Mlp().ptr(), world,
                           torch::kCPU);
    EXPECT_EQ(fp32.core().strategy().segments().front().grad.scalar_type(), at::kFloat) << "stage " << stage;
    EXPECT_NO_THROW(one_step(fp32));
    auto plain = initialize(config_with(zero), test::Mlp().ptr(), world, torch::kCPU);
    if (world->size() == 1)
      EXPECT_EQ(plain.core().strategy().segments().front().grad.scalar_type(), at::kBFloat16) << "stage " << stage;
  }
  // Stage 3 (a layer stack): its gradient shard accumulates the window in fp32
  // too, and the layers it gathers stay in bf16.
  const std::string zero3 = R"("bf16": {"enabled": true}, "zero_optimization": {"stage": 3})";
  for (const bool fp32 : {true, false}) {
    auto model = models::build_model(models::make_model_config("tiny-gpt2"));
    auto engine = initialize(config_with(zero3 + (fp32 ? R"(, "data_types": {"grad_accum_dtype": "fp32"})" : "")),
                             model, world, torch::kCPU);
    EXPECT_EQ(engine.core().strategy().segments().front().grad.scalar_type(), fp32 ? at::kFloat : at::kBFloat16);
    const at::Tensor tokens = torch::randint(256, {2, 9}, at::kLong);
    engine.backward(engine.forward(tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8)));
    EXPECT_TRUE(engine.step());
    for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  }
}
