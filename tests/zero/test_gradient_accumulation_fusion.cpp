// Gradient-accumulation fusion (the weight-gradient GEMM writing into the flat gradient) at every ZeRO stage.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <tuple>

#include "../distributed/distributed_test_context.h"
#include "../engine/tiny_lm_training.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"
#include "stratum/nn/linear.h"

using namespace stratum;
using namespace stratum::test::tiny_lm;

// Megatron's gradient-accumulation fusion (every stage, on by default): the
// weight-gradient GEMM writes fp32 straight into the flat gradient (stages
// 2/3: the bucket's staging buffer). Training
// equals the unfused path's (autograd's 16-bit gradient widened by the hook)
// for tied and untied models, with and without accumulation, over MPI (fp32)
// and NCCL (fp32; bf16, where the product is written in fp32 from 16-bit
// operands, so within bf16 rounding). Only the linear weights of layers that
// declare the contract get the sink, never a tied embedding (two ops read it).
TEST(GradientAccumulationFusion, MatchesUnfused) {
  for (const auto& backend : test::backends()) {
    const bool gpu = backend.device.is_cuda();
    if (gpu) EXPECT_TRUE(nn::fp32_product_of_16bit_available()) << "ATen's addmm.dtype_out is missing: no fusion";
    for (const std::string precision : gpu ? std::vector<std::string>{"fp32", "bf16"} : std::vector<std::string>{"fp32"})
      // Each model also with its MLP recomputing the activation (nn::gelu_mlp,
      // nn::swiglu_linear: their weight gradients reach the sink through nn::weight_grad).
      for (const auto& [model, tied, recompute] : std::vector<std::tuple<std::string, std::string, std::string>>{
               {"tiny-gpt2", "true", "false"}, {"tiny-llama", "false", "false"}, {"tiny-llama", "true", "false"},
               {"tiny-gpt2", "true", "true"}, {"tiny-llama", "false", "true"}})
        for (int stage : {0, 1, 2, 3})
          for (int gas : {1, 2}) {
            Options o{model, {{"tie_embeddings", tied}, {"recompute_mlp_activation", recompute}}, stage, gas, precision};
            // Stage 3: no persistent unit, so every linear weight is gathered (and fused).
            const std::string base = stage == 3 ? R"(, "stage3_param_persistence_threshold": 0)" : "";
            o.zero_extra = base;
            const TrainRun fused = train(o, backend.world, kSteps, backend.device);
            o.zero_extra = base + R"(, "gradient_accumulation_fusion": false)";
            expect_same_training(fused, train(o, backend.world, kSteps, backend.device),
                                 precision == "fp32" ? 1e-5 : 2e-2,
                                 backend.name + " " + precision + " " + model + " tied " + tied + " recompute " +
                                     recompute + " stage " + std::to_string(stage) + " gas " + std::to_string(gas));
          }
  }
  struct Probe : nn::WeightGradSink {
    at::Tensor weight_grad_destination(const at::Tensor&, bool*) override { return at::Tensor(); }
    void weight_grad_written(const at::Tensor&) override {}
  } probe;
  for (const bool fusion : {true, false}) {
    Options o{"tiny-gpt2", {}, 1};
    if (!fusion) o.zero_extra = R"(, "gradient_accumulation_fusion": false)";
    Config config = Config::from_string(config_json(o), "fusion");
    auto model = models::build_model(models::make_model_config(o.model, o.overrides));
    auto engine = initialize(config, model, test::context().cpu_world, c10::Device(c10::kCPU));
    int linears = 0;
    for (const auto& item : model->named_parameters()) {
      const bool linear = item.value().dim() == 2 && item.key().find(".h.") != std::string::npos;
      const bool wte = item.key().find("wte") != std::string::npos;
      if (!linear && !wte) continue;
      linears += linear;
      if (linear && fusion) {
        EXPECT_ANY_THROW(nn::register_weight_grad_sink(item.value(), &probe)) << item.key() << " has no sink";
      } else {
        EXPECT_NO_THROW(nn::register_weight_grad_sink(item.value(), &probe)) << item.key() << " has a sink";
        nn::unregister_weight_grad_sink(item.value(), &probe);
      }
    }
    EXPECT_EQ(linears, 8) << "two blocks of four linear weights";
  }
  // A layer that does not declare the contract keeps autograd's path.
  struct PlainLayer : nn::StackLayer {
    PlainLayer() : StackLayer("PlainLayer") { fc = register_module("fc", torch::nn::Linear(8, 8)); }
    at::Tensor forward(const at::Tensor& x) override { return nn::linear(x, fc->weight, fc->bias); }
    torch::nn::Linear fc{nullptr};
  };
  auto stack = std::make_shared<nn::LayerStackImpl>();
  auto layer = std::make_shared<PlainLayer>();
  stack->append(layer, "h.0");
  Options o{"tiny-gpt2", {}, 1};
  auto engine = initialize(Config::from_string(config_json(o), "fusion"), stack, test::context().cpu_world,
                           c10::Device(c10::kCPU));
  EXPECT_NO_THROW(nn::register_weight_grad_sink(layer->fc->weight, &probe)) << "an undeclared layer has a sink";
  nn::unregister_weight_grad_sink(layer->fc->weight, &probe);
}

// The sequence-tiled MLP and LM head loss (tiled_mlp_tokens,
// tiled_loss_tokens) train as the untiled model at every ZeRO stage, fusion
// on (their layers keep autograd's path) and stage 3 gathering the head's
// weight (the tied embedding's too) for the loss inside the head's layer,
// with and without activation checkpointing (which recomputes the blocks,
// and in a one-layer LLaMA the head as well).
TEST(SequenceTiling, TrainsAsUntiledAtEveryZeroStage) {
  const test::Backend backend = test::backends().front();  // the CPU ranks (MPI)
  for (const auto& [model, tied, layers] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"tiny-gpt2", "true", "2"}, {"tiny-llama", "false", "2"}, {"tiny-llama", "true", "1"}})
    for (int stage : {0, 1, 2, 3})
      for (const std::string checkpointing : {"", "{}"}) {
        Options o{model, {{"tie_embeddings", tied}, {"layers", layers}}, stage};
        o.checkpointing = checkpointing;
        if (stage == 3) o.zero_extra = R"(, "stage3_param_persistence_threshold": 0)";
        const TrainRun untiled = train(o, backend.world, kSteps, backend.device);
        o.overrides.push_back({"tiled_mlp_tokens", "5"});
        o.overrides.push_back({"tiled_loss_tokens", "7"});
        expect_same_training(train(o, backend.world, kSteps, backend.device), untiled, 1e-5,
                             backend.name + " " + model + " tied " + tied + " layers " + layers + " stage " +
                                 std::to_string(stage) + (checkpointing.empty() ? "" : " checkpointed"));
      }
}
