// The engine against itself at DP = 1: 20 steps of a small MLP at DP = 2 and 4,
// ZeRO stages 0, 1 and 2, accumulation 1 and 2, give the same losses and final
// weights (fp32: relative difference <= 1e-5; bf16: <= 2e-2 on losses, stated
// below). Plus per-rank model-state bytes against the ZeRO formulas, fp16
// overflow handling across ranks, and bad input failing on every rank alike.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks). The DP = 1 reference and the
// DP = 2 runs use sub-communicators of the world, so one 4-rank job checks all.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "dp_groups.h"
#include "mlp.h"
#include "stratum/engine/engine.h"

using namespace stratum;
using stratum::test::groups_of;
using stratum::test::rel_diff;
using stratum::test::Mlp;

namespace {


constexpr int kGlobalBatch = 16;
constexpr int kSteps = 20;

struct TrainRun {
  std::vector<double> losses;
  at::Tensor weights;  // every parameter, flattened, fp32
  ModelStateBytes bytes;
  int64_t param_numel = 0, total_numel = 0, buckets = 0;
  std::vector<bool> skipped;
  std::vector<double> scales;
  std::vector<double> grad_norms;  // unscaled, before clipping: checks the DP averaging (Adam alone is scale-invariant)
};

std::string config_json(int stage, int gas, const std::string& precision, int64_t bucket, bool overlap) {
  std::string prec = precision == "bf16"   ? R"("bf16": {"enabled": true},)"
                     : precision == "fp16" ? R"("fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1},)"
                                           : "";
  return R"({"train_batch_size": )" + std::to_string(kGlobalBatch) + R"(, "gradient_accumulation_steps": )" +
         std::to_string(gas) + "," + prec + R"(
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 5}},
    "gradient_clipping": 0.5,
    "zero_optimization": {"stage": )" + std::to_string(stage) + R"(, "reduce_bucket_size": )" + std::to_string(bucket) +
         R"(, "overlap_comm": )" + (overlap ? "true" : "false") + "}}";
}

// Rank r of a DP group of n, micro-batch k of gas: a fixed slice of the global batch.
TrainRun train(const std::string& json, const std::shared_ptr<distributed::Communicator>& dp, int steps = kSteps,
               int overflow_step = -1, c10::Device device = c10::Device(c10::kCPU)) {
  Config config = Config::from_string(json, "test-config");
  torch::manual_seed(42);
  auto model = Mlp();
  auto engine = initialize(config, model.ptr(), dp, device);
  const auto& b = engine.core().batch();
  const int n = dp->size(), r = dp->rank();
  const int64_t m = b.micro_batch_per_gpu;
  TrainRun run;
  for (int step = 0; step < steps; ++step) {
    torch::manual_seed(1000 + step);
    at::Tensor x = torch::randn({kGlobalBatch, 16}).to(device), y = torch::randn({kGlobalBatch, 4}).to(device);
    double local = 0;
    for (int k = 0; k < b.gradient_accumulation_steps; ++k) {
      const int64_t start = (k * n + r) * m;
      at::Tensor out = engine.forward(x.narrow(0, start, m));
      at::Tensor loss = torch::mse_loss(out.to(torch::kFloat), y.narrow(0, start, m));
      if (step == overflow_step && r == n - 1) loss = loss * std::numeric_limits<float>::infinity();
      engine.backward(loss);
      engine.step();
      local += loss.item<double>() / b.gradient_accumulation_steps;
    }
    at::Tensor l = torch::full({1}, local, torch::TensorOptions().dtype(torch::kDouble).device(device));
    dp->all_reduce(l, distributed::ReduceOp::avg)->wait();
    run.losses.push_back(l.item<double>());
    run.skipped.push_back(engine.last_step_skipped());
    run.scales.push_back(engine.loss_scale());
    run.grad_norms.push_back(engine.core().last_grad_norm());
  }
  std::vector<at::Tensor> flat;
  for (auto& p : model->parameters()) flat.push_back(p.detach().to(torch::kFloat).cpu().reshape(-1));
  run.weights = torch::cat(flat);
  run.bytes = engine.core().model_state_bytes();
  run.param_numel = engine.core().strategy().layout().param_numel();
  run.total_numel = engine.core().strategy().layout().total_numel();
  run.buckets = static_cast<int64_t>(engine.core().strategy().layout().buckets().size());
  return run;
}

void expect_same_training(const TrainRun& got, const TrainRun& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i)
    EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]), tol)
        << what << ": loss at step " << i << " " << got.losses[i] << " vs " << ref.losses[i];
  EXPECT_LE(rel_diff(got.weights, ref.weights), tol) << what << ": final weights";
  for (size_t i = 0; i < got.grad_norms.size(); ++i)
    EXPECT_LE(std::abs(got.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i], tol)
        << what << ": gradient norm at step " << i << " " << got.grad_norms[i] << " vs " << ref.grad_norms[i];
}

}  // namespace

TEST(Engine, DataParallelMatchesSingleRankFp32) {
  const int world = test::context().cpu_world->size();
  if (world < 2) GTEST_SKIP() << "needs 2 or more ranks";
  auto single = groups_of(1);
  for (int stage : {0, 1, 2})
    for (int gas : {1, 2})
      for (bool small_buckets : {true, false}) {
        const int64_t bucket = small_buckets ? 300 : 500000000;
        const std::string json = config_json(stage, gas, "fp32", bucket, /*overlap=*/small_buckets);
        TrainRun ref = train(json, single);
        EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference must learn";
        EXPECT_GT(*std::max_element(ref.grad_norms.begin(), ref.grad_norms.end()), 0.5) << "clipping must be active";
        for (int dp = 2; dp <= world; dp *= 2) {
          TrainRun got = train(json, dp == world ? test::context().cpu_world : groups_of(dp));
          expect_same_training(got, ref, 1e-5,
                               "stage " + std::to_string(stage) + " gas " + std::to_string(gas) + " dp " +
                                   std::to_string(dp) + (small_buckets ? " small buckets" : ""));
        }
      }
}

// DeepSpeed's gradient pre/post scaling: the average over DP must not change.
TEST(Engine, PrescaleAndPredivideKeepTheAverage) {
  const int world = test::context().cpu_world->size();
  if (world < 2) GTEST_SKIP() << "needs 2 or more ranks";
  auto single = groups_of(1);
  for (const char* extra : {R"("prescale_gradients": true,)", R"("gradient_predivide_factor": 2.0,)"})
    for (int stage : {0, 2}) {
      std::string json = config_json(stage, 1, "fp32", 300, true);
      json.insert(1, extra);
      TrainRun ref = train(json, single);
      TrainRun got = train(json, test::context().cpu_world);
      expect_same_training(got, ref, 1e-5, std::string(extra) + " stage " + std::to_string(stage));
    }
}

// bf16: parameters and activations in bf16, fp32 masters and fp32 gradient
// reduction. Rounding of the reduced bf16 gradients depends on the summation
// order, so runs agree to bf16 precision: losses within 2e-2 relative.
TEST(Engine, DataParallelMatchesSingleRankBf16) {
  for (const auto& backend : test::backends()) {
    const int world = backend.world->size();
    if (world < 2) GTEST_SKIP() << "needs 2 or more ranks";
    auto single = groups_of(1, backend.world);
    for (int stage : {0, 1, 2}) {
      const std::string json = config_json(stage, 2, "bf16", 300, true);
      TrainRun ref = train(json, single, kSteps, -1, backend.device);
      TrainRun got = train(json, backend.world, kSteps, -1, backend.device);
      EXPECT_LT(ref.losses.back(), ref.losses.front()) << backend.name << " bf16 must learn";
      for (size_t i = 0; i < ref.losses.size(); ++i)
        EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]), 2e-2)
            << backend.name << " bf16 stage " << stage << " step " << i;
      EXPECT_LE(rel_diff(got.weights, ref.weights), 2e-2) << backend.name << " bf16 stage " << stage;
    }
  }
}

// fp32 on the GPU: NCCL reductions against the single-GPU run (cuBLAS without
// TF32; tolerance as on the CPU).
TEST(Engine, DataParallelMatchesSingleRankFp32OnGpus) {
  const auto& ctx = test::context();
  if (!ctx.gpu_world || ctx.gpu_world->size() < 2) GTEST_SKIP() << "needs 2 or more GPUs";
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(ctx.cuda_device));
  auto single = groups_of(1, ctx.gpu_world);
  for (int stage : {0, 1, 2}) {
    const std::string json = config_json(stage, 2, "fp32", 300, true);
    TrainRun ref = train(json, single, kSteps, -1, device);
    TrainRun got = train(json, ctx.gpu_world, kSteps, -1, device);
    expect_same_training(got, ref, 1e-5, "nccl fp32 stage " + std::to_string(stage));
  }
}

// Per-rank model-state bytes, Ψ parameters (T with bucket padding), N ranks:
// 16-bit: stage 0 16Ψ, stage 1 4Ψ + 12Ψ/N, stage 2 2Ψ + 14Ψ/N;
// fp32:   stage 0 16Ψ (master = params), stage 1 8Ψ + 12Ψ/N, stage 2 4Ψ + 16Ψ/N.
TEST(Engine, ModelStateBytesFollowTheZeroFormulas) {
  auto world = test::context().cpu_world;
  const int64_t n = world->size();
  for (const std::string precision : {"bf16", "fp32"})
    for (int stage : {0, 1, 2}) {
      TrainRun run = train(config_json(stage, 1, precision, 300, true), world, /*steps=*/1);
      const int64_t T = run.total_numel, S = T / n;
      const int64_t w = precision == "bf16" ? 2 : 4;  // bytes of a parameter
      const int64_t g = n > 1 ? 4 : w;                 // of a gradient: the fp32 wire's over several ranks
      int64_t expected = 0;
      if (stage == 0) expected = precision == "bf16" ? (w + g + 12) * T : 16 * T;  // fp32: the params are the master
      if (stage == 1) expected = (w + g) * T + 12 * S;
      if (stage == 2) expected = w * T + (g + 12) * S;
      EXPECT_EQ(run.bytes.total(), expected) << precision << " stage " << stage;
      // Padding: fewer than N elements per bucket.
      EXPECT_LT(T - run.param_numel, n * run.buckets);
      EXPECT_GE(T, run.param_numel);
      // And against Ψ itself, within that padding.
      const double psi = static_cast<double>(run.param_numel);
      const double formula = stage == 0   ? static_cast<double>(expected) / T * psi
                             : stage == 1 ? (w + g) * psi + 12 * psi / n
                                          : w * psi + (g + 12) * psi / n;
      EXPECT_NEAR(static_cast<double>(run.bytes.total()), formula, 16.0 * n * run.buckets)
          << precision << " stage " << stage;
    }
}

TEST(Engine, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  auto world = test::context().cpu_world;
  for (int stage : {0, 2}) {
    TrainRun clean = train(config_json(stage, 1, "fp16", 300, true), world, 6);
    TrainRun hit = train(config_json(stage, 1, "fp16", 300, true), world, 6, /*overflow_step=*/3);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(hit.skipped[i], i == 3) << "stage " << stage << " step " << i;
    EXPECT_DOUBLE_EQ(hit.scales[2], 256.0);
    EXPECT_DOUBLE_EQ(hit.scales[3], 128.0) << "the scale halves on the overflow";
    EXPECT_DOUBLE_EQ(clean.scales[5], 256.0);
    // Before the overflow the runs are identical.
    for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(hit.losses[i], clean.losses[i]);
  }
}

// When the dynamic scale grows, the step must still unscale by the scale the
// backward used: unscaled gradient norms equal those of a static-scale run.
TEST(Engine, Fp16ScaleGrowthKeepsGradientsUnscaledCorrectly) {
  auto world = test::context().cpu_world;
  auto with_fp16 = [](const std::string& old_section, const std::string& new_section) {
    std::string json = config_json(2, 1, "fp16", 300, true);
    return json.replace(json.find(old_section), old_section.size(), new_section);
  };
  const std::string base = R"("fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1})";
  std::string dynamic = with_fp16(base, R"("fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1,
                                                    "loss_scale_window": 2})");
  std::string fixed = with_fp16(base, R"("fp16": {"enabled": true, "loss_scale": 256})");
  TrainRun grow = train(dynamic, world, 8);
  TrainRun flat = train(fixed, world, 8);
  EXPECT_GT(grow.scales.back(), grow.scales.front()) << "the scale must have grown";
  for (size_t i = 0; i < grow.grad_norms.size(); ++i)
    EXPECT_NEAR(grow.grad_norms[i] / flat.grad_norms[i], 1.0, 2e-2) << "step " << i;
}

TEST(Engine, LearningRateFollowsTheScheduleAndStepsCount) {
  auto world = test::context().cpu_world;
  Config config = Config::from_string(config_json(1, 2, "fp32", 300, true), "lr");
  torch::manual_seed(42);
  auto model = Mlp();
  auto engine = initialize(config, model.ptr(), world, torch::kCPU);
  const int64_t m = engine.core().batch().micro_batch_per_gpu;
  EXPECT_DOUBLE_EQ(engine.lr(), 0.001) << "before the first step: warmup_min_lr";
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(engine.is_gradient_accumulation_boundary(), i % 2 == 1);
    engine.backward(torch::mse_loss(engine.forward(torch::randn({m, 16})), torch::zeros({m, 4})));
    EXPECT_EQ(engine.step(), i % 2 == 1);
  }
  EXPECT_EQ(engine.global_steps(), 2);
  EXPECT_EQ(engine.core().micro_steps(), 4);
  EXPECT_GT(engine.lr(), 0.001);
  EXPECT_LT(engine.lr(), 0.01);
}

// A config without an optimizer section (as Hugging Face's and Megatron's
// often are) trains with AdamW at the section's defaults: the same step as
// {"optimizer": {"type": "AdamW"}}.
TEST(Engine, NoOptimizerSectionTrainsWithAdamWAtItsDefaults) {
  auto world = test::context().cpu_world;
  const int64_t n = world->size();
  auto one_step = [&](const std::string& json) {
    torch::manual_seed(7);
    auto model = Mlp();
    auto engine = initialize(Config::from_string(json, "opt.json"), model.ptr(), world, torch::kCPU);
    torch::manual_seed(8);
    const at::Tensor x = torch::randn({4, 16}), y = torch::randn({4, 4});
    engine.backward(torch::mse_loss(engine.forward(x), y));
    EXPECT_TRUE(engine.step());
    return torch::cat({model->fc1->weight.detach().flatten(), model->fc2->weight.detach().flatten()});
  };
  const std::string batch = R"({"train_batch_size": )" + std::to_string(4 * n);
  const at::Tensor defaulted = one_step(batch + "}");
  const at::Tensor explicit_adamw = one_step(batch + R"(, "optimizer": {"type": "AdamW"}})");
  EXPECT_TRUE(torch::equal(defaulted, explicit_adamw));
  EXPECT_NE(stratum::config::default_optimizer_note().find("training uses AdamW at the section's defaults (lr 0.001"),
            std::string::npos)
      << stratum::config::default_optimizer_note();
}

TEST(Engine, BadInputIsAClearErrorOnEveryRank) {
  auto world = test::context().cpu_world;
  const int n = world->size();
  // A batch triple that does not fit the world size.
  if (n > 1) {
    Config bad = Config::from_string(R"({"train_batch_size": 6, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "Adam"}})", "batch.json");
    try {
      initialize(bad, Mlp().ptr(), world, torch::kCPU);
      ADD_FAILURE() << "accepted a batch that does not fit";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("train_batch_size 6 is not divisible"), std::string::npos) << e.what();
    }
  }
  // An optimizer type it does not know never gets past the config.
  EXPECT_THROW(Config::from_string(R"({"train_batch_size": 16, "optimizer": {"type": "Adafactor"}})"), ConfigError);
  // A model with no trainable parameters.
  struct Frozen : torch::nn::Module {
    Frozen() { register_parameter("w", torch::ones({3}), /*requires_grad=*/false); }
  };
  Config ok = Config::from_string(config_json(2, 1, "fp32", 300, true), "ok.json");
  try {
    initialize(ok, std::make_shared<Frozen>(), world, torch::kCPU);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no trainable parameters"), std::string::npos) << e.what();
  }
  // Nobody hangs: every rank reaches this barrier.
  world->barrier()->wait();
}

TEST(Engine, ParametersKeepTheirIdentity) {
  auto world = test::context().cpu_world;
  Config config = Config::from_string(config_json(2, 1, "fp32", 300, true), "id");
  torch::manual_seed(42);
  auto model = Mlp();
  at::Tensor w_before = model->fc1->weight;
  auto impl_before = w_before.unsafeGetTensorImpl();
  auto engine = initialize(config, model.ptr(), world, torch::kCPU);
  EXPECT_EQ(model->fc1->weight.unsafeGetTensorImpl(), impl_before);
  at::Tensor snapshot = model->fc1->weight.detach().clone();
  const int64_t m = engine.core().batch().micro_batch_per_gpu;
  engine.backward(torch::mse_loss(engine.forward(torch::randn({m, 16})), torch::ones({m, 4})));
  engine.step();
  EXPECT_FALSE(torch::equal(model->fc1->weight.detach(), snapshot)) << "the step changed the user's tensor";
  EXPECT_TRUE(torch::equal(w_before.detach(), model->fc1->weight.detach()));
}

// Stages 0-2 keep gradients in the strategy's buffers, not in .grad: the
// window's first backward writes each slot (no zeroing), later micro-steps add
// to it, and a parameter that backward skips in a window reads as zero (not
// the last window's gradient; at stage 2 its staging range is not zero-filled
// in advance). (One rank: no reduction in flight while the test reads.)
TEST(Engine, FirstBackwardOfAWindowWritesTheGradients) {
  auto world = groups_of(1);
  for (int stage : {0, 1, 2}) {
    Config config = Config::from_string(config_json(stage, 2, "fp32", 300, true), "grads");
    torch::manual_seed(42);
    auto model = Mlp();
    auto engine = initialize(config, model.ptr(), world, torch::kCPU);
    auto& strategy = engine.core().strategy();
    // Parameter i's gradient in the buffer (one rank: every segment is a whole bucket).
    auto grad_of = [&](const at::Tensor& p) {
      const auto params = model->parameters();
      const int i = static_cast<int>(std::find_if(params.begin(), params.end(), [&](const at::Tensor& q) {
                                       return q.is_same(p);
                                     }) - params.begin());
      const zero::ParamSlot& slot = strategy.layout().params().at(i);
      const bool one_segment = strategy.segments().size() == 1;
      const at::Tensor& flat = strategy.segments()[one_segment ? 0 : slot.bucket].grad;
      const int64_t base = one_segment ? 0 : strategy.layout().buckets()[slot.bucket].offset;
      return flat.narrow(0, slot.offset - base, slot.numel).view(p.sizes()).clone();
    };
    const int64_t m = engine.core().batch().micro_batch_per_gpu;
    at::Tensor x = torch::randn({m, 16}), y = torch::ones({m, 32});
    auto all = [&] { return torch::mse_loss(engine.forward(x), torch::ones({m, 4})); };
    auto without_fc3 = [&] { return torch::mse_loss(torch::gelu(model->fc2(torch::gelu(model->fc1(x)))), y); };
    for (int k = 0; k < 2; ++k) {  // a window that reaches fc3: its slot gets a gradient
      engine.backward(all());
      engine.step();
    }
    at::Tensor first;
    for (int k = 0; k < 2; ++k) {  // a window that does not
      engine.backward(without_fc3());
      EXPECT_FALSE(model->fc1->weight.grad().defined()) << "stage " << stage << ": the buffer holds the gradient";
      EXPECT_EQ(grad_of(model->fc3->weight).abs().sum().item<double>(), 0.0) << "stage " << stage << " micro-step " << k;
      at::Tensor g1 = grad_of(model->fc1->weight);
      EXPECT_GT(g1.abs().sum().item<double>(), 0.0);
      if (k == 0) first = g1;
      else EXPECT_TRUE(torch::allclose(g1, 2 * first)) << "stage " << stage << ": accumulated";
      engine.step();
    }
  }
}
