// Lamb through the engine. Its trust ratio is per parameter while ZeRO's ranks
// hold slices of flat buckets that cut across parameters, so: the segment ->
// parameter runs cover every parameter exactly once and no padding; ZeRO-0 on
// one rank equals the per-parameter reference of tests/common/lamb_reference.h
// on the unflattened model; every stage (0-3), with and without CPU offload of
// the optimizer (and of the parameters at stage 3), with accumulation, on this
// job's ranks, trains like ZeRO-0 on one rank (fp32: relative difference <=
// 1e-6 on losses and final weights, 1e-5 on the clipping's gradient norms;
// bf16: 2e-2); a Lamb run
// saves and resumes exactly; Adam without bias correction trains the same with
// and without offload.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "../common/lamb_reference.h"
#include "../distributed/distributed_test_context.h"
#include "dp_groups.h"
#include "mlp.h"
#include "shared_temp_dir.h"
#include "tiny_lm_training.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/core/fs.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/param_runs.h"

using namespace stratum;
using stratum::test::groups_of;
using stratum::test::rel_diff;

namespace {

const std::string kLamb =
    R"({"type": "Lamb", "params": {"lr": 0.01, "weight_decay": 0.01, "eps": 1e-4, "max_coeff": 10.0, "min_coeff": 0.01}})";

// Every element of every parameter in exactly one run of one rank's segments;
// runs inside their segments, padding in none.
void check_cover(const zero::FlatLayout& layout, bool segment_per_bucket, const std::string& what) {
  const int dp = layout.dp_size();
  std::vector<std::vector<int>> seen(layout.params().size());
  for (size_t i = 0; i < seen.size(); ++i) seen[i].assign(layout.params()[i].numel, 0);
  for (int r = 0; r < dp; ++r) {
    const auto pieces = layout.rank_pieces(r, segment_per_bucket);
    size_t segments = 0;
    std::vector<int64_t> seg_numel;
    for (const auto& piece : pieces) {
      segments = std::max<size_t>(segments, piece.segment + 1);
      seg_numel.resize(segments, 0);
      seg_numel[piece.segment] = std::max(seg_numel[piece.segment], piece.segment_offset + piece.numel);
    }
    const auto runs = segment_param_runs(layout, pieces, segments);
    ASSERT_EQ(runs.size(), segments) << what;
    for (size_t s = 0; s < runs.size(); ++s) {
      int64_t end = 0;
      for (const auto& run : runs[s]) {
        EXPECT_GE(run.offset, end) << what << ": runs ascending, not overlapping";
        EXPECT_LE(run.offset + run.numel, seg_numel[s]) << what;
        end = run.offset + run.numel;
        // Which flat elements the run is: map the segment offset back through the pieces.
        for (const auto& piece : pieces) {
          if (piece.segment != static_cast<int>(s)) continue;
          const int64_t from = std::max(run.offset, piece.segment_offset),
                        to = std::min(run.offset + run.numel, piece.segment_offset + piece.numel);
          for (int64_t e = from; e < to; ++e) {
            const int64_t flat = piece.flat_offset + (e - piece.segment_offset);
            const auto& slot = layout.params()[run.param];
            ASSERT_GE(flat, slot.offset) << what << ": a run element outside its parameter (padding?)";
            ASSERT_LT(flat, slot.offset + slot.numel) << what << ": a run element outside its parameter (padding?)";
            ++seen[run.param][flat - slot.offset];
          }
        }
      }
    }
  }
  for (size_t i = 0; i < seen.size(); ++i)
    for (size_t e = 0; e < seen[i].size(); ++e)
      ASSERT_EQ(seen[i][e], 1) << what << ": parameter " << i << " element " << e;
}

// Losses and final weights within 1e-6 relative. The gradient norms (the
// clipping's, computed before the optimizer runs) within 1e-5: their fp32 sums
// run in another order at each stage (3e-6 apart at the first step already,
// with AdamW as with Lamb).
void expect_close(const test::tiny_lm::TrainRun& got, const test::tiny_lm::TrainRun& ref, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]), 1e-6)
        << what << ": loss at step " << i << " " << got.losses[i] << " vs " << ref.losses[i];
    EXPECT_LE(std::abs(got.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i], 1e-5)
        << what << ": gradient norm at step " << i << " " << got.grad_norms[i] << " vs " << ref.grad_norms[i];
  }
  ASSERT_EQ(got.weights.numel(), ref.weights.numel()) << what;
  EXPECT_LE(rel_diff(got.weights, ref.weights), 1e-6) << what << ": final weights";
}

}  // namespace

TEST(LambEngine, ParamRunsCoverEveryParameterOnce) {
  std::vector<zero::ParamSpec> specs;
  for (int64_t n : {7, 1, 30, 0, 12, 5, 64, 3}) specs.push_back({"p" + std::to_string(specs.size()), {n}, n});
  for (int dp : {1, 2, 3, 4, 7})
    for (int64_t bucket : {int64_t{1}, int64_t{20}, int64_t{1000}}) {
      const std::string what = "dp " + std::to_string(dp) + " bucket " + std::to_string(bucket);
      const auto layout = zero::FlatLayout::build(specs, bucket, dp);
      check_cover(layout, /*segment_per_bucket=*/true, what + " (stages 1/2)");
      check_cover(layout, /*segment_per_bucket=*/false, what + " (stage 3)");
    }
  // Stage 0: one piece, the whole buffer.
  const auto layout = zero::FlatLayout::build(specs, 20, 1);
  const auto runs = segment_param_runs(layout, {zero::FlatPiece{0, layout.total_numel(), 0, 0}}, 1);
  EXPECT_EQ(runs[0].size(), specs.size() - 1) << "one run per parameter, none for the empty one";
  try {
    segment_param_runs(layout, {zero::FlatPiece{0, 4, 2, 0}}, 1);
    ADD_FAILURE() << "a piece of segment 2 of 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("segment 2"), std::string::npos) << e.what();
  }
}

// ZeRO-0 on one rank against the reference on the unflattened MLP: its
// gradients from plain autograd, Lamb in double (no clipping, constant lr):
// 8 steps within 2e-6 relative (fp32 against double).
TEST(LambEngine, Stage0MatchesThePerParameterReference) {
  for (bool bias_correction : {true, false}) {
    const std::string json = R"({"train_batch_size": 16, "gradient_clipping": 0.0,
        "optimizer": {"type": "Lamb", "params": {"lr": 0.02, "weight_decay": 0.01, "bias_correction": )" +
                             std::string(bias_correction ? "true" : "false") + R"(}},
        "zero_optimization": {"stage": 0, "reduce_bucket_size": 300}})";
    Config config = Config::from_string(json, "lamb-reference");
    torch::manual_seed(42);
    auto model = test::Mlp();
    std::vector<at::Tensor> init;
    for (const auto& p : model->parameters()) init.push_back(p.detach().clone());
    auto engine = initialize(config, model.ptr(), groups_of(1), torch::kCPU);

    torch::manual_seed(42);
    auto ref_model = test::Mlp();  // the same initial weights
    test::LambReference ref(init);
    double worst = 0;
    for (int step = 0; step < 8; ++step) {
      torch::manual_seed(1000 + step);
      at::Tensor x = torch::randn({16, 16}), y = torch::randn({16, 4});
      engine.backward(torch::mse_loss(engine.forward(x), y));
      engine.step();
      // The reference model at the reference's weights, rounded to fp32 as the model computes.
      {
        torch::NoGradGuard no_grad;
        auto params = ref_model->parameters();
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(ref.p[i]);
      }
      ref_model->zero_grad();
      torch::mse_loss(ref_model->forward(x), y).backward();
      std::vector<at::Tensor> grads;
      for (const auto& p : ref_model->parameters()) grads.push_back(p.grad().clone());
      ref.apply(grads, *config.optimizer, 0.02, config.optimizer->beta1);
      auto params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i)
        worst = std::max(worst, ((params[i].detach().to(torch::kDouble) - ref.p[i]).abs().max() /
                                 ref.p[i].abs().max()).item<double>());
    }
    EXPECT_LE(worst, 2e-6) << "bias_correction " << bias_correction;
    if (test::context().cpu_world->rank() == 0)
      std::printf("  ZeRO-0 vs reference (bias_correction %d): max rel diff %.3g\n", bias_correction, worst);
  }
}

// The tiny LLaMA (a LayerStack, so stage 3 runs too) in fp32 at every stage,
// offload variants, accumulation 2, on one rank and on all of this job's
// ranks, against ZeRO-0 on one rank.
TEST(LambEngine, EveryStageAndDataParallelSizeMatchesSingleRankStage0) {
  using namespace test::tiny_lm;
  auto world = test::context().cpu_world;
  const std::string offload_opt = R"(, "offload_optimizer": {"device": "cpu"})";
  const std::string offload_param = R"(, "offload_param": {"device": "cpu"})";
  for (int gas : {1, 2}) {
    Options ref_opts{"tiny-llama", {{"tie_embeddings", "false"}}, 0, gas, "fp32"};
    ref_opts.optimizer = kLamb;
    const TrainRun ref = train(ref_opts, groups_of(1));
    EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference must learn";
    std::vector<int> sizes = {1};
    if (world->size() > 1) sizes.push_back(world->size());
    for (int dp : sizes) {
      if (dp == 1 && world->size() > 1 && gas == 2) continue;  // one rank: covered with gas 1
      double worst_weights = 0, worst_loss = 0;
      for (int stage : {0, 1, 2, 3}) {
        std::vector<std::string> variants = {""};
        if (stage > 0) variants.push_back(offload_opt);
        if (stage == 3) variants.push_back(offload_opt + offload_param);
        for (const auto& extra : variants) {
          if (stage == 0 && dp == 1 && extra.empty()) continue;  // the reference itself
          Options o = ref_opts;
          o.stage = stage;
          o.zero_extra = extra;
          const TrainRun got = train(o, dp == world->size() ? world : groups_of(dp));
          const std::string what = "dp " + std::to_string(dp) + " stage " + std::to_string(stage) + " gas " +
                                   std::to_string(gas) + extra;
          expect_close(got, ref, what);
          worst_weights = std::max(worst_weights, rel_diff(got.weights, ref.weights));
          for (size_t i = 0; i < ref.losses.size(); ++i)
            worst_loss = std::max(worst_loss, std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]));
        }
      }
      if (world->rank() == 0)
        std::printf("  dp %d gas %d, stages 0-3 and offload: max rel diff final weights %.3g, losses %.3g\n", dp, gas,
                    worst_weights, worst_loss);
    }
  }
}

// bf16 (16-bit gradients into Lamb's first pass at DP 1, the rounded copy
// written by Lamb at stage 3 with offload) against bf16 ZeRO-0 on one rank.
TEST(LambEngine, Bf16MatchesSingleRankStage0) {
  using namespace test::tiny_lm;
  auto world = test::context().cpu_world;
  Options ref_opts{"tiny-llama", {{"tie_embeddings", "false"}}, 0, 1, "bf16"};
  ref_opts.optimizer = kLamb;
  const TrainRun ref = train(ref_opts, groups_of(1));
  for (const auto& [stage, extra] : std::vector<std::pair<int, std::string>>{
           {2, ""}, {3, ""}, {2, R"(, "offload_optimizer": {"device": "cpu"})"},
           {3, R"(, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})"}}) {
    Options o = ref_opts;
    o.stage = stage;
    o.zero_extra = extra;
    expect_same_training(train(o, world), ref, 2e-2, "bf16 stage " + std::to_string(stage) + extra);
  }
}

// A Lamb run saved after 3 steps and loaded into an engine with other initial
// weights continues exactly as the run that was not interrupted (its states
// are Adam's: moments and step), at every stage and with offload.
TEST(LambEngine, CheckpointResumesExactly) {
  using namespace test::tiny_lm;
  auto world = test::context().cpu_world;
  const int r = world->rank();
  for (const auto& [stage, extra] : std::vector<std::pair<int, std::string>>{
           {0, ""}, {1, ""}, {2, ""}, {3, ""}, {2, R"(, "offload_optimizer": {"device": "cpu"})"}}) {
    Options o{"tiny-llama", {{"tie_embeddings", "false"}}, stage, 1, "fp32", extra};
    o.optimizer = kLamb;
    const Config config = Config::from_string(config_json(o), "lamb-ckpt");
    auto make = [&](int seed) {
      torch::manual_seed(seed);
      auto model = models::build_model(models::make_model_config(o.model, o.overrides));
      return std::make_pair(model, initialize(config, model, world, torch::kCPU));
    };
    auto train_step = [&](auto& engine, int step) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(2000 + step);
      at::Tensor tokens = at::randint(256, {kGlobalBatch, kSeq + 1}, gen, at::TensorOptions().dtype(at::kLong));
      const int64_t m = engine.core().batch().micro_batch_per_gpu;
      at::Tensor mine = tokens.narrow(0, r * m, m);
      at::Tensor loss = engine.forward(mine.narrow(1, 0, kSeq), mine.narrow(1, 1, kSeq));
      engine.backward(loss);
      engine.step();
      at::Tensor l = torch::full({1}, loss.item<double>(), torch::kDouble);
      world->all_reduce(l, distributed::ReduceOp::avg)->wait();
      return l.item<double>();
    };
    const std::string dir = test::shared_temp_dir("stratum_lamb_ckpt_");
    auto [model, straight] = make(42);
    std::vector<double> want;
    for (int s = 0; s < 6; ++s) {
      want.push_back(train_step(straight, s));
      if (s == 2) save_checkpoint(straight.core(), dir, "global_step3", {});
    }
    auto [other, resumed] = make(7);  // other initial weights: the checkpoint must overwrite them
    load_checkpoint(resumed.core(), dir);
    for (int s = 3; s < 6; ++s)
      EXPECT_DOUBLE_EQ(train_step(resumed, s), want[s]) << "stage " << stage << extra << " step " << s;
    std::vector<at::Tensor> a, b;
    straight.core().strategy().for_each_full_param([&](int, const at::Tensor& v) { a.push_back(v.reshape(-1).clone()); });
    resumed.core().strategy().for_each_full_param([&](int, const at::Tensor& v) { b.push_back(v.reshape(-1).clone()); });
    EXPECT_TRUE(torch::equal(torch::cat(a), torch::cat(b))) << "stage " << stage << extra;
    world->barrier()->wait();
    if (r == 0) fs::remove_tree(dir);
  }
}

// Adam without bias correction: the device path (ATen ops) and the host's CPU
// Adam (offload) train alike, and differently from the corrected Adam.
TEST(LambEngine, AdamWithoutBiasCorrectionSameWithOffload) {
  using namespace test::tiny_lm;
  auto world = test::context().cpu_world;
  Options o{"tiny-llama", {{"tie_embeddings", "false"}}, 2, 1, "fp32"};
  o.optimizer = R"({"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01, "eps": 1e-4, "bias_correction": false}})";
  const TrainRun device = train(o, world);
  Options off = o;
  off.zero_extra = R"(, "offload_optimizer": {"device": "cpu"})";
  expect_same_training(train(off, world), device, 1e-5, "AdamW bias_correction false with offload");
  Options corrected = o;
  corrected.optimizer.clear();  // the default AdamW with the same lr, decay and eps, corrected
  EXPECT_GT(rel_diff(train(corrected, world).weights, device.weights), 1e-3) << "bias_correction changed nothing";
}

// On GPUs: the device path (foreach ops, NCCL's all-reduce of the partial
// norms) and, in bf16, the rounded parameters Lamb writes into the model's
// buffer itself (device_params16), at every stage, against ZeRO-0 on one GPU
// (fp32: 1e-5, the GPU's reductions; bf16: 2e-2).
TEST(LambEngine, OnGpusMatchesSingleGpuStage0) {
  using namespace test::tiny_lm;
  const auto& ctx = test::context();
  if (!ctx.gpu_world) GTEST_SKIP() << "needs a GPU";
  const c10::Device gpu(c10::kCUDA, static_cast<c10::DeviceIndex>(ctx.cuda_device));
  for (const std::string precision : {"fp32", "bf16"}) {
    Options ref_opts{"tiny-llama", {{"tie_embeddings", "false"}}, 0, 1, precision};
    ref_opts.optimizer = kLamb;
    const TrainRun ref = train(ref_opts, groups_of(1, ctx.gpu_world), kSteps, gpu);
    EXPECT_LT(ref.losses.back(), ref.losses.front()) << precision << " must learn";
    for (int stage : {0, 1, 2, 3})
      for (const std::string extra : {"", R"(, "offload_optimizer": {"device": "cpu"})"}) {
        if (stage == 0 && !extra.empty()) continue;
        Options o = ref_opts;
        o.stage = stage;
        o.zero_extra = extra;
        const TrainRun got = train(o, ctx.gpu_world, kSteps, gpu);
        expect_same_training(got, ref, precision == "fp32" ? 1e-5 : 2e-2,
                             "gpu " + precision + " stage " + std::to_string(stage) + extra);
        if (ctx.gpu_world->rank() == 0)
          std::printf("  gpu %s stage %d%s: max rel diff final weights %.3g\n", precision.c_str(), stage,
                      extra.c_str(), rel_diff(got.weights, ref.weights));
      }
  }
}
