// ZeRO-3 and activation checkpointing against the plain engine, on the tiny
// built-in models (GPT-2 with tied embeddings, LLaMA untied): stage 3 at
// DP = 2 and 4 reproduces stage 0 at DP = 1 (fp32: losses, gradient norms and
// final weights within 1e-5 relative), with and without persistent small
// parameters, prefetching and kept layers; checkpointed layers give the same
// training as stored activations (dropout on: the RNG replay matters); per-rank
// model-state bytes are 16Ψ/N; a model that is not a LayerStack is refused.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <tuple>

#include "../distributed/distributed_test_context.h"
#include "dp_groups.h"
#include "mlp.h"
#include "shared_temp_dir.h"
#include <nlohmann/json.hpp>

#include "stratum/engine/checkpoint.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/safetensors.h"
#include "stratum/nn/embedding.h"
#include "stratum/nn/linear.h"
#include "stratum/optim/grad_clip.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "stratum/zero/row_scatter_cuda.h"
#include "stratum/zero/wire_cast_cuda.h"
#endif

using namespace stratum;
using stratum::test::groups_of;
using stratum::test::rel_diff;

namespace {

constexpr int kGlobalBatch = 8;
constexpr int kSeq = 16;
constexpr int kSteps = 6;

struct Options {
  std::string model = "tiny-gpt2";
  std::vector<std::pair<std::string, std::string>> overrides;
  int stage = 0;
  int gas = 1;
  std::string precision = "fp32";
  std::string zero_extra;  // more zero_optimization keys, e.g. ", \"stage3_prefetch_bucket_size\": 0"
  std::string checkpointing;  // an activation_checkpointing section, or empty
  std::string top_extra;      // more top-level keys, each followed by a comma
};

std::string config_json(const Options& o) {
  std::string prec = o.precision == "bf16"   ? R"("bf16": {"enabled": true},)"
                     : o.precision == "fp16" ? R"("fp16": {"enabled": true, "initial_scale_power": 8},)"
                                             : "";
  std::string ac = o.checkpointing.empty() ? "" : R"("activation_checkpointing": )" + o.checkpointing + ",";
  return R"({"train_batch_size": )" + std::to_string(kGlobalBatch) + R"(, "gradient_accumulation_steps": )" +
         std::to_string(o.gas) + "," + prec + ac + o.top_extra + R"(
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01, "eps": 1e-4}},
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

TrainRun train(const Options& o, const std::shared_ptr<distributed::Communicator>& dp, int steps = kSteps,
               c10::Device device = c10::Device(c10::kCPU)) {
  Config config = Config::from_string(config_json(o), "zero3-test");
  torch::manual_seed(42);
  auto model = models::build_model(models::make_model_config(o.model, o.overrides));
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

void expect_same_training(const TrainRun& got, const TrainRun& ref, double tol, const std::string& what) {
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
const std::vector<std::pair<std::string, std::string>> kStage3Variants = {
    {"no persistence, no prefetch, release at once",
     R"(, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0)"},
    {"defaults (persistent small params, prefetch, keep)", ""},
    {"live cap", R"(, "stage3_param_persistence_threshold": 100, "stage3_max_live_parameters": 30000,
                    "stage3_prefetch_bucket_size": 20000, "stage3_max_reuse_distance": 40000)"},
};

}  // namespace

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
           {R"({})", R"({"cpu_checkpointing": true})", R"({"number_checkpoints": 1})"}) {
        Options o = ref_opts;
        o.stage = stage;
        o.checkpointing = ac;
        expect_same_training(train(o, world), ref, 1e-5, model + " stage " + std::to_string(stage) + " checkpointing " + ac);
      }
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

// A token embedding's lookup gradient travels as rows (nn/embedding.h),
// untied (the whole gradient) or tied (added to the LM head's reduced dense
// part) with "sparse_gradients": stages 0-2 over 2 and 4 ranks train as
// stage 0 on one rank (which reduces nothing and takes the dense gradient),
// with and without gradient accumulation, and the embedding has a bucket of
// its own. Without the key the gradient stays dense.
TEST(RowGradients, MatchOneRank) {
  const int world = test::context().cpu_world->size();
  if (world < 2) GTEST_SKIP() << "needs 2 or more ranks";
  for (const std::string model : {"tiny-llama", "tiny-gpt2"})
    for (const std::string tied : {"false", "true"})
      for (int gas : {1, 2}) {
        Options ref_opts{model, {{"tie_embeddings", tied}}, 0, gas};
        TrainRun ref = train(ref_opts, groups_of(1));
        for (int stage : {0, 1, 2})
          for (int dp = 2; dp <= world; dp *= 2) {
            Options o = ref_opts;
            o.stage = stage;
            o.top_extra = R"("sparse_gradients": true,)";
            expect_same_training(train(o, dp == world ? test::context().cpu_world : groups_of(dp)), ref, 1e-5,
                                 "rows: " + model + " tied " + tied + " gas " + std::to_string(gas) + " stage " +
                                     std::to_string(stage) + " dp " + std::to_string(dp));
          }
      }
  // Only "sparse_gradients": true hands the lookup's gradient to the strategy
  // (a second sink for the weight is refused while the strategy's is there).
  struct NoSink : nn::RowGradientSink {
    void take_rows(const at::Tensor&, const at::Tensor&, const at::Tensor&) override {}
  } probe;
  for (const bool rows : {false, true}) {
    Options o{"tiny-llama", {{"tie_embeddings", "false"}}, 1};
    if (rows) o.top_extra = R"("sparse_gradients": true,)";
    Config config = Config::from_string(config_json(o), "rows");
    auto model = models::build_model(models::make_model_config("tiny-llama", o.overrides));
    auto engine = initialize(config, model, test::context().cpu_world, c10::Device(c10::kCPU));
    const at::Tensor embedding = model->parameters().front();  // model.embed_tokens.weight
    if (rows) {
      EXPECT_ANY_THROW(nn::register_row_gradient_sink(embedding, &probe)) << "no sink for the embedding";
      const auto& layout = engine.core().strategy().layout();
      const auto& slot = layout.params().front();
      EXPECT_EQ(layout.buckets()[slot.bucket].params.size(), 1u) << "the embedding shares its bucket";
    } else {
      EXPECT_NO_THROW(nn::register_row_gradient_sink(embedding, &probe)) << "dense gradients by default";
      nn::unregister_row_gradient_sink(embedding, &probe);
    }
  }
}

// Ranks may look up different numbers of rows (here sequences of different
// lengths): the exchanged gradient is still the mean of every rank's dense
// one, which an engine on each rank alone (dense gradients) gives.
TEST(RowGradients, UnevenRowCountsAcrossRanks) {
  if (test::context().cpu_world->size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  for (const auto& backend : test::backends())
    for (const std::string tied : {"false", "true"}) {
      const std::vector<std::pair<std::string, std::string>> overrides = {{"tie_embeddings", tied}};
      const auto& world = backend.world;
      if (world->size() < 2) continue;
      const int r = world->rank();
      auto embedding_grad = [&](const std::shared_ptr<distributed::Communicator>& dp) {
        Options o{"tiny-llama", overrides, 0};
        o.top_extra = R"("sparse_gradients": true,)";
        Config config = Config::from_string(config_json(o), "rows");
        torch::manual_seed(42);
        auto engine =
            initialize(config, models::build_model(models::make_model_config("tiny-llama", overrides)), dp, backend.device);
        auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + r);
        const int64_t len = kSeq - 4 * (r % 3);  // 16, 12, 8, 16 tokens
        at::Tensor tokens =
            at::randint(256, {2, len + 1}, gen, at::TensorOptions().dtype(at::kLong)).to(backend.device);
        engine.backward(engine.forward(tokens.narrow(1, 0, len), tokens.narrow(1, 1, len)));
        auto& strategy = engine.core().strategy();
        strategy.wait_gradients();
        const auto& slot = strategy.layout().params().front();
        return strategy.segments().front().grad.narrow(0, slot.offset, slot.numel).clone();
      };
      const at::Tensor exchanged = embedding_grad(world);
      at::Tensor expected = embedding_grad(groups_of(1, world));
      world->all_reduce(expected, distributed::ReduceOp::avg)->wait();
      EXPECT_GT(expected.abs().sum().item<double>(), 0.0) << backend.name << " tied " << tied;
      EXPECT_LE(rel_diff(exchanged.cpu(), expected.cpu()), 1e-6) << backend.name << " tied " << tied;
    }
}

// The fp32 wire copy of 16-bit gradients equals ATen's conversion: aligned
// and unaligned starts, lengths around the 8-element pack, and an empty one.
TEST(Zero3, WireWideningMatchesAtenOnAGpu) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    const at::Tensor all = torch::randn({100'013}, torch::TensorOptions().device(torch::kCUDA)).to(dtype);
    for (const int64_t offset : {0, 3})
      for (const int64_t n : {0, 1, 7, 8, 9, 100'000}) {
        const at::Tensor src = all.narrow(0, offset, n);
        at::Tensor dst = torch::full({n}, -1.f, torch::TensorOptions().device(torch::kCUDA));
        ASSERT_EQ(zero::cuda::launch_widen_to_float(src.const_data_ptr(),
                                                    dtype == torch::kBFloat16 ? zero::cuda::Dtype::bf16
                                                                              : zero::cuda::Dtype::f16,
                                                    dst.data_ptr<float>(), n,
                                                    c10::cuda::getCurrentCUDAStream().stream()),
                  cudaSuccess);
        EXPECT_TRUE(torch::equal(dst, src.to(torch::kFloat))) << dtype << " offset " << offset << " n " << n;
      }
  }
#else
  GTEST_SKIP() << "built without the CUDA kernels";
#endif
}

// The exchanged rows' kernel equals ATen's dense embedding gradient, scaled,
// on every window of the flattened weight (whole, one rank's slice starting
// mid-row, one partial row, empty), with repeated ids, for 16-bit and fp32 rows.
TEST(RowGradients, ScatterKernelMatchesAtenOnAGpu) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA);
  const int64_t vocab = 300, hidden = 72, n = 1000;
  const at::Tensor ids = torch::randint(40, {n}, on_gpu.dtype(torch::kLong)) * 7;  // ~25 repeats an id
  for (const auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    const at::Tensor rows = torch::randn({n, hidden}, on_gpu).to(dtype);
    const at::Tensor dense = at::embedding_dense_backward(rows.to(torch::kFloat), ids, vocab, -1, false).reshape({-1});
    const auto [sorted, order] = at::sort(ids, /*stable=*/true, 0, false);
    const auto kind = dtype == torch::kBFloat16 ? zero::cuda::Dtype::bf16
                      : dtype == torch::kHalf   ? zero::cuda::Dtype::f16
                                                : zero::cuda::Dtype::f32;
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
             {0, vocab * hidden}, {vocab * hidden / 2 + 5, vocab * hidden}, {7 * hidden + 3, 7 * hidden + 50}, {9, 9}}) {
      at::Tensor dest = torch::ones({end - begin + 1}, on_gpu);  // one more: nothing written past end
      ASSERT_EQ(zero::cuda::launch_add_sorted_rows(sorted.const_data_ptr<int64_t>(), order.const_data_ptr<int64_t>(), n,
                                                   rows.const_data_ptr(), kind, hidden, 0.5f, dest.data_ptr<float>(),
                                                   begin, end, c10::cuda::getCurrentCUDAStream().stream()),
                cudaSuccess);
      const at::Tensor expected = torch::cat({dense.narrow(0, begin, end - begin) * 0.5 + 1, torch::ones({1}, on_gpu)});
      EXPECT_LE((dest - expected).abs().max().item<double>(), 1e-4) << dtype << " [" << begin << ", " << end << ")";
    }
  }
#else
  GTEST_SKIP() << "built without the CUDA kernels";
#endif
}

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
  for (const auto& cell : std::vector<std::pair<int, std::string>>{
           {0, ""}, {1, ""}, {2, R"(, "overlap_param_gather": true)"}, {3, ""}}) {
    const int stage = cell.first;
    const std::string extra = cell.second;
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
    auto file = models::read_safetensors(dir + "/t/model_16bit.safetensors");
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
