// The pipeline engine against the single-process engine: GPT-2 (tied
// embedding and head, which then span the first and last stage) and LLaMA
// (untied), 20 steps of the same global batch and seed, for GPipe, 1F1B and
// interleaved 1F1B at PP = 2 and 4, and PP x DP = 2 x 2 at ZeRO-1, ZeRO-2 and
// ZeRO-2 with the optimizer offloaded: losses, gradient norms and final
// weights within 1e-5 relative (fp32; PP x DP weights 5e-5, resumed at another layout 1e-4, see below); bf16 within 2e-2 on the losses and
// 5e-2 on the gradient norms.
// Bad pipeline configs fail on every rank alike with the numbers.
//
// Runs under mpirun (CTest: 2 and 4 ranks); each layout runs on a group of the
// world's ranks, the reference on every rank by itself.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstring>
#include <set>
#include <limits>
#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "../distributed/distributed_test_context.h"
#include "../engine/dp_groups.h"
#include "../engine/shared_temp_dir.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/checkpoint/engine_checkpoint.h"
#include "stratum/checkpoint/manifest.h"
#include "stratum/core/fs.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/pipeline_stages.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/tensor_parallel_plan.h"

using namespace stratum;
using stratum::test::groups_of;
using stratum::test::rel_diff;
using stratum::test::without_key_bias;
using stratum::test::sub_context;

namespace {

constexpr int kSteps = 20;
constexpr int kSeq = 16;

struct Layout {
  int pp = 1, dp = 1, tp = 1;
  bool sequence_parallel = false;
  std::string order = "tp-dp-pp";  // topology.order
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  int zero = 0;
  bool offload = false;
  std::string precision = "fp32";
  int gas = 4;
  int global_batch = 8;
  int checkpoint_interval = 0;  // pipeline.activation_checkpoint_interval
  int64_t persistence_threshold = -1;  // zero_optimization.stage3_param_persistence_threshold (-1: the default)
  int64_t tiled_loss = 0;  // the model's tiled_loss_tokens (the pipeline's model only; 0: off)
};

std::string config_json(const Layout& l) {
  std::string prec = l.precision == "bf16"   ? R"("bf16": {"enabled": true},)"
                     : l.precision == "fp16" ? R"("fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1},)"
                                             : "";
  std::string pipe = R"("pipeline": {"stages": )" + std::to_string(l.pp) + R"(, "schedule": ")" + l.schedule + "\"" +
                     (l.checkpoint_interval ? R"(, "activation_checkpoint_interval": )" +
                                                  std::to_string(l.checkpoint_interval) : "") +
                     (l.virtual_stages > 1 ? R"(, "virtual_stages": )" + std::to_string(l.virtual_stages) : "") + "},";
  std::string offload = l.offload ? R"(, "offload_optimizer": {"device": "cpu", "pin_memory": false})" : "";
  std::string tp = l.tp > 1 ? R"("tensor_parallel": {"autotp_size": )" + std::to_string(l.tp) +
                                  (l.sequence_parallel ? R"(, "sequence_parallel": true)" : "") + "},"
                            : "";
  tp += R"("topology": {"order": ")" + l.order + "\"},";
  return R"({"train_batch_size": )" + std::to_string(l.global_batch) + R"(, "gradient_accumulation_steps": )" +
         std::to_string(l.gas) + "," + prec + pipe + tp + R"(
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0003, "warmup_max_lr": 0.003, "warmup_num_steps": 5}},
    "gradient_clipping": 0.3,
    "zero_optimization": {"stage": )" + std::to_string(l.zero) + R"(, "reduce_bucket_size": 2000)" +
         (l.persistence_threshold >= 0
              ? R"(, "stage3_param_persistence_threshold": )" + std::to_string(l.persistence_threshold)
              : "") +
         offload + "}}";
}

models::ModelConfig model_config(const std::string& arch, int64_t tiled_loss = 0) {
  return models::make_model_config(arch == "gpt2" ? "tiny-gpt2" : "tiny-llama",
                                   {{"layers", "6"}, {"max_seq_len", std::to_string(kSeq)},
                                    {"tiled_loss_tokens", std::to_string(tiled_loss)}});
}

struct TrainRun {
  std::vector<double> losses, grad_norms;
  std::map<std::string, at::Tensor> weights;  // this rank's parameters by name, fp32
  int64_t deferred = 0;  // zb-h1: weight-gradient GEMMs deferred from B to W in the last step
  // After the span (Span::evaluate): the held-out loss and a greedy sample.
  double eval_loss = 0;
  std::vector<int64_t> sample;
  int64_t param_bytes = 0;  // this rank's 16-bit (or fp32) parameters held between steps
  // Tensor parallelism: the weights are this rank's shards of the model of `config`.
  models::ModelConfig config;
  int64_t tp = 1, tp_rank = 0;
};

// Step s's global batch of kSeq + 1 tokens a row.
at::Tensor step_tokens(int step, int global_batch) { return test::counting_tokens(step, global_batch, kSeq); }

// Steps [first, first + steps) of a run, optionally resumed from and saved to a checkpoint.
struct Span {
  int first = 0, steps = kSteps;
  std::string load_dir, save_dir;
  bool evaluate = false;
};

// The held-out batch: rows no step trains on.
at::Tensor eval_tokens(int global_batch) { return step_tokens(1000, global_batch); }
const std::vector<int64_t> kPrompt = {3, 1, 4, 1, 5};
constexpr int kSampleTokens = 6;

// The single-process engine: micro-batch k is rows [k·M, (k+1)·M).
TrainRun train_reference(const std::string& arch, Layout l, const Span& span = {}) {
  l.pp = 1;
  l.dp = 1;
  l.tp = 1;
  l.sequence_parallel = false;
  Config config = Config::from_string(config_json(l), "reference");
  torch::manual_seed(42);
  auto model = models::build_model(model_config(arch));
  auto self = groups_of(1);
  auto engine = initialize(config, model, self, c10::Device(c10::kCPU));
  if (!span.load_dir.empty()) load_checkpoint(engine.core(), span.load_dir);
  const int64_t micro = l.global_batch / l.gas;
  TrainRun run;
  for (int s = span.first; s < span.first + span.steps; ++s) {
    at::Tensor t = step_tokens(s, l.global_batch);
    double loss = 0;
    for (int k = 0; k < l.gas; ++k) {
      at::Tensor b = t.narrow(0, k * micro, micro);
      at::Tensor out = engine.forward(b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq));
      engine.backward(out);
      engine.step();
      loss += out.item<double>() / l.gas;
    }
    run.losses.push_back(loss);
    run.grad_norms.push_back(engine.core().last_grad_norm());
  }
  if (!span.save_dir.empty()) save_checkpoint(engine.core(), span.save_dir, "step" + std::to_string(span.first + span.steps), {});
  if (span.evaluate) {
    const at::Tensor t = eval_tokens(l.global_batch);
    int k = 0;
    run.eval_loss = engine.eval_batch([&] {
      at::Tensor b = t.narrow(0, k++ * micro, micro);
      return MicroBatch{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
    });
    run.sample = engine.generate(kPrompt, models::GenerateOptions{kSampleTokens, 0.0, 0, 7});
  }
  for (auto& p : model->named_parameters()) run.weights[p.key()] = p.value().detach().to(torch::kFloat).clone();
  return run;
}

// The pipeline engine on `world` (pp x dp ranks): DP rank r of n takes rows
// [(k·n + r)·m, ...) of micro-batch k, m = global / (gas·n). The model is
// born sharded: a skeleton of which the engine draws only its stage's pieces.
TrainRun train_pipeline(const std::string& arch, const Layout& l, const std::shared_ptr<distributed::Communicator>& world,
                        const Span& span = {}) {
  Config config = Config::from_string(config_json(l), "pipeline");
  torch::manual_seed(42);
  auto model = models::construct_model(model_config(arch, l.tiled_loss), tensor_parallel_group(config, sub_context(world)),
                                       c10::kMeta);
  auto engine = initialize(config, model, sub_context(world));
  if (!span.load_dir.empty()) load_checkpoint(engine, span.load_dir);
  const int n = l.dp, r = static_cast<int>(engine.core().dp()->rank());
  const int64_t m = l.global_batch / (l.gas * n);
  TrainRun run;
  for (int s = span.first; s < span.first + span.steps; ++s) {
    at::Tensor t = step_tokens(s, l.global_batch);
    int k = 0;
    const double loss = engine.train_batch([&] {
      at::Tensor b = t.narrow(0, (k * n + r) * m, m);
      ++k;
      return MicroBatch{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
    });
    run.losses.push_back(loss);
    run.grad_norms.push_back(engine.core().last_grad_norm());
  }
  if (!span.save_dir.empty()) save_checkpoint(engine, span.save_dir, "step" + std::to_string(span.first + span.steps), {});
  run.deferred = engine.pipeline()->deferred_weight_gemms();
  run.param_bytes = engine.core().model_state_bytes().params;
  if (span.evaluate) {
    const at::Tensor t = eval_tokens(l.global_batch);
    int k = 0;
    run.eval_loss = engine.eval_batch([&] {
      at::Tensor b = t.narrow(0, (k * n + r) * m, m);
      ++k;
      return MicroBatch{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
    });
    run.sample = engine.generate(kPrompt, models::GenerateOptions{kSampleTokens, 0.0, 0, 7});
  }
  run.config = model->config();
  run.tp = model->tensor_parallel().size();
  run.tp_rank = model->tensor_parallel().rank();
  engine.core().sync_params();
  for (auto& p : model->named_parameters())  // this stage's: the others are never drawn (meta) or freed
    if (p.value().numel() > 0 && !nn::is_unmaterialized(p.value())) run.weights[p.key()] = p.value().detach().to(torch::kFloat).clone();
  return run;
}

// The data-parallel engine (stratum::initialize) on `world`, tensor parallel
// when l.tp > 1: DP rank r of n takes rows [(k·n + r)·m, ...) of micro-step k.
TrainRun train_data_parallel(const std::string& arch, Layout l, const std::shared_ptr<distributed::Communicator>& world,
                             const Span& span = {}) {
  l.pp = 1;
  Config config = Config::from_string(config_json(l), "data parallel");
  const distributed::DistContext ctx = sub_context(world);
  torch::manual_seed(42);
  auto model = models::build_model(model_config(arch), c10::kCPU, tensor_parallel_group(config, ctx));
  auto engine = initialize(config, model, ctx);
  if (!span.load_dir.empty()) load_checkpoint(engine.core(), span.load_dir);
  TrainRun run;
  test::train_steps(engine, span.first, span.steps, l.global_batch, l.gas, kSeq, run.losses, run.grad_norms);
  engine.core().sync_params();
  for (auto& p : model->named_parameters()) run.weights[p.key()] = p.value().detach().to(torch::kFloat).clone();
  run.config = model->config();
  run.tp = model->tensor_parallel().size();
  run.tp_rank = model->tensor_parallel().rank();
  return run;
}

// `norm_tol`, `weight_tol`: the gradient norms' and final weights' tolerances (default: tol).
void expect_same_training(const TrainRun& got, const TrainRun& ref, double tol, const std::string& what,
                          bool weights = true, double norm_tol = 0, double weight_tol = 0) {
  if (norm_tol == 0) norm_tol = tol;
  if (weight_tol == 0) weight_tol = tol;
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]), tol)
        << what << ": loss at step " << i << " " << got.losses[i] << " vs " << ref.losses[i];
    EXPECT_LE(std::abs(got.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i], norm_tol)
        << what << ": gradient norm at step " << i << " " << got.grad_norms[i] << " vs " << ref.grad_norms[i];
  }
  if (!weights) return;
  EXPECT_FALSE(got.weights.empty()) << what;
  for (const auto& [name, w] : got.weights) {
    auto it = ref.weights.find(name);
    ASSERT_NE(it, ref.weights.end()) << what << ": " << name;
    const auto spec = got.tp > 1 ? models::shard_spec(got.config, name, got.tp, got.tp_rank) : std::nullopt;
    const at::Tensor want = spec ? nn::tp::take_shard(it->second, *spec) : it->second;
    EXPECT_LE(rel_diff(without_key_bias(name, w), without_key_bias(name, want)), weight_tol)
        << what << ": final " << name;
  }
}

std::string describe(const std::string& arch, const Layout& l) {
  return arch + " pp " + std::to_string(l.pp) + " x dp " + std::to_string(l.dp) +
         (l.tp > 1 ? " x tp " + std::to_string(l.tp) + (l.sequence_parallel ? " sp" : "") : "") + " " + l.schedule +
         (l.virtual_stages > 1 ? " v" + std::to_string(l.virtual_stages) : "") + " zero " + std::to_string(l.zero) +
         (l.offload ? " offload" : "") + " " + l.precision;
}

}  // namespace

TEST(PipelineEngine, EverySchedule_MatchesSingleProcess_Fp32) {
  const int world = test::context().cpu_world->size();
  for (const std::string arch : {"gpt2", "llama"})
    for (int pp = 2; pp <= world; pp *= 2) {
      auto group = groups_of(pp);
      std::vector<Layout> layouts;
      for (const std::string schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
        Layout l;
        l.pp = pp;
        l.schedule = schedule;
        if (schedule == "interleaved") l.virtual_stages = 2;
        layouts.push_back(l);
      }
      Layout few = layouts[1];  // fewer micro-batches than stages
      few.gas = 1;
      layouts.push_back(few);
      for (const Layout& l : layouts) {
        const TrainRun ref = train_reference(arch, l);
        EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference must learn";
        const TrainRun got = train_pipeline(arch, l, group);
        expect_same_training(got, ref, 1e-5, describe(arch, l));
        // The split is real: B left the linear layers' weight GEMMs to W.
        if (l.schedule == "zb-h1") EXPECT_GT(got.deferred, 0) << describe(arch, l);
      }
    }
}

TEST(PipelineEngine, PipelineTimesDataParallel_ZeRO12Offload_MatchSingleProcess) {
  const int world = test::context().cpu_world->size();
  if (world < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const std::string arch : {"gpt2", "llama"})
    for (auto [zero, offload] : std::vector<std::pair<int, bool>>{{0, false}, {1, false}, {2, false}, {2, true}}) {
      Layout l;
      l.pp = 2;
      l.dp = 2;
      l.zero = zero;
      l.offload = offload;
      const TrainRun ref = train_reference(arch, l);
      // Each micro-batch split over two data-parallel ranks sums its gradient
      // in another order: GPT-2's MLP weights drift up to 2.6e-5 over the 20
      // steps (at every ZeRO stage alike), while losses and norms stay within 1e-5.
      expect_same_training(train_pipeline(arch, l, test::context().cpu_world), ref, 1e-5, describe(arch, l),
                           /*weights=*/true, /*norm_tol=*/1e-5, /*weight_tol=*/5e-5);
    }
}

// Tensor parallelism inside the stages: PP x TP = 2 x 2 for every schedule,
// with and without sequence parallelism, at ZeRO-0 and 1 (the tied
// embedding's vocabulary shards summed per tensor-parallel index).
TEST(PipelineEngine, PipelineTimesTensorParallel_MatchesSingleProcess) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const std::string arch : {"gpt2", "llama"})
    for (const std::string schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"})
      for (auto [zero, sp] : std::vector<std::pair<int, bool>>{{0, false}, {1, true}}) {
        Layout l;
        l.pp = 2;
        l.tp = 2;
        l.schedule = schedule;
        if (schedule == "interleaved") l.virtual_stages = 2;
        l.zero = zero;
        l.sequence_parallel = sp;
        const TrainRun ref = train_reference(arch, l);
        // Weights 2e-4: tensor parallelism's sums round in another order, which
        // Adam's normalised step carries into near-zero-gradient elements
        // (engine/test_tensor_parallel_engine.cpp).
        expect_same_training(train_pipeline(arch, l, test::context().cpu_world), ref, 1e-5, describe(arch, l),
                             /*weights=*/true, /*norm_tol=*/1e-5, /*weight_tol=*/2e-4);
      }
}

// PP x TP = 2 x 2 with the optimizer offloaded at ZeRO-2, with
// pipeline.activation_checkpoint_interval, and in bf16 (losses within 2%,
// norms 15%, as the pipeline's bf16 test). fp32 norms 2e-5: GPT-2's
// checkpointed stages with sequence parallelism measured 1.05e-5 at step 14
// on a Xeon with AMX (the norms summed in double; the gradients' own sums
// over the group rounding in another order); the losses stay within 1e-5.
TEST(PipelineEngine, PipelineTimesTensorParallelOffloadCheckpointingBf16) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const auto& world = test::context().cpu_world;
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    l.pp = 2;
    l.tp = 2;
    l.zero = 2;
    l.offload = true;
    l.sequence_parallel = true;
    l.checkpoint_interval = 2;
    Layout plain = l;  // the single process checkpoints nothing
    plain.checkpoint_interval = 0;
    const TrainRun ref = train_reference(arch, plain);
    expect_same_training(train_pipeline(arch, l, world), ref, 1e-5, describe(arch, l) + " checkpointed", true, 2e-5,
                         2e-4);
    Layout half;
    half.pp = 2;
    half.tp = 2;
    half.precision = "bf16";
    expect_same_training(train_pipeline(arch, half, world), train_reference(arch, half), 2e-2, describe(arch, half),
                         /*weights=*/false, /*norm_tol=*/0.15);
  }
}

// topology.order "pp-tp-dp": the stages of a pipeline are consecutive ranks
// and a tensor-parallel pair is {0, 2} or {1, 3}; training is the same.
TEST(PipelineEngine, PipelineTimesTensorParallelInAnotherRankOrder) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  Layout l;
  l.pp = 2;
  l.tp = 2;
  l.zero = 1;
  l.order = "pp-tp-dp";
  const TrainRun ref = train_reference("gpt2", l);
  expect_same_training(train_pipeline("gpt2", l, test::context().cpu_world), ref, 1e-5, describe("gpt2", l) + " " + l.order,
                       /*weights=*/true, /*norm_tol=*/1e-5, /*weight_tol=*/2e-4);
}

// A checkpoint saved at PP x TP = 2 x 2 (ZeRO-1, sequence parallel) resumes
// exactly at its layout, and at PP 4 and on the single process within the
// tolerances of another reduction order.
TEST(PipelineEngine, PipelineTimesTensorParallelCheckpointResumesAtAnyLayout) {
  const auto& world = test::context().cpu_world;
  if (world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const std::string dir = test::shared_temp_dir("stratum_pp_tp_ckpt_");
  constexpr int kHalf = 5;
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout saved;
    saved.pp = 2;
    saved.tp = 2;
    saved.zero = 1;
    saved.sequence_parallel = true;
    const TrainRun whole = train_reference(arch, saved, Span{0, 2 * kHalf, "", ""});
    const TrainRun uninterrupted = train_pipeline(arch, saved, world, Span{0, 2 * kHalf, "", ""});
    train_pipeline(arch, saved, world, Span{0, kHalf, "", dir + "/" + arch});
    const std::string tag_dir = dir + "/" + arch + "/step" + std::to_string(kHalf);
    EXPECT_EQ(verify_checkpoint(tag_dir).shards, 4) << arch;
    const ConsolidatedCheckpoint c = read_consolidated_checkpoint(tag_dir);
    EXPECT_EQ(c.manifest->pipeline_stages, 2) << arch;
    EXPECT_EQ(c.manifest->tensor_parallel_size, 2) << arch;
    EXPECT_EQ(c.tensors.size(), whole.weights.size()) << arch;
    TrainRun tail;
    tail.losses.assign(whole.losses.begin() + kHalf, whole.losses.end());
    tail.grad_norms.assign(whole.grad_norms.begin() + kHalf, whole.grad_norms.end());
    tail.weights = whole.weights;
    const TrainRun same = train_pipeline(arch, saved, world, Span{kHalf, kHalf, dir + "/" + arch, ""});
    for (int i = 0; i < kHalf; ++i)
      EXPECT_EQ(same.losses[i], uninterrupted.losses[kHalf + i]) << arch << ": exact resume, step " << kHalf + i;
    Layout four = saved;
    four.pp = 4;
    four.tp = 1;
    four.sequence_parallel = false;
    expect_same_training(train_pipeline(arch, four, world, Span{kHalf, kHalf, dir + "/" + arch, ""}), tail, 1e-5,
                         arch + " resumed at pp 4", true, 1e-5, 2e-4);
    expect_same_training(train_reference(arch, saved, Span{kHalf, kHalf, dir + "/" + arch, ""}), tail, 1e-5,
                         arch + " resumed by the single process", true, 1e-5, 2e-4);
  }
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_tree(dir);
}

// 3D: DP x PP x TP = 2 x 2 x 2 on 8 ranks (CTest pipeline_engine_3d_np8) at
// ZeRO-1 and ZeRO-2, with and without sequence parallelism, against the
// single process; then the reshard matrix from a 2 x 2 x 2 ZeRO-2 checkpoint:
// resumed at 1 x 4 x 2 ZeRO-1, 8 x 1 x 1 ZeRO-3, 2 x 1 x 4 ZeRO-1 and on the
// single process, each continuing as the uninterrupted run does.
TEST(PipelineEngine, ThreeD_DataPipelineTensor_MatchesSingleProcessAndReshards) {
  const auto& world = test::context().cpu_world;
  if (world->size() != 8) GTEST_SKIP() << "needs 8 ranks";
  for (const std::string arch : {"gpt2", "llama"})
    for (auto [zero, sp] : std::vector<std::pair<int, bool>>{{1, false}, {2, true}}) {
      Layout l;
      l.dp = 2;
      l.pp = 2;
      l.tp = 2;
      l.zero = zero;
      l.sequence_parallel = sp;
      const TrainRun ref = train_reference(arch, l);
      expect_same_training(train_pipeline(arch, l, world), ref, 1e-5, describe(arch, l), /*weights=*/true,
                           /*norm_tol=*/1e-5, /*weight_tol=*/2e-4);
    }
  const std::string dir = test::shared_temp_dir("stratum_3d_ckpt_");
  constexpr int kHalf = 5;
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout saved;  // 16 sequences a step in 2 micro-batches: 8 data-parallel ranks take one each
    saved.dp = 2;
    saved.pp = 2;
    saved.tp = 2;
    saved.zero = 2;
    saved.global_batch = 16;
    saved.gas = 2;
    const std::string ckpt = dir + "/" + arch;
    const TrainRun whole = train_reference(arch, saved, Span{0, 2 * kHalf, "", ""});
    train_pipeline(arch, saved, world, Span{0, kHalf, "", ckpt});
    EXPECT_EQ(verify_checkpoint(ckpt + "/step" + std::to_string(kHalf)).shards, 8) << arch;
    TrainRun tail;
    tail.losses.assign(whole.losses.begin() + kHalf, whole.losses.end());
    tail.grad_norms.assign(whole.grad_norms.begin() + kHalf, whole.grad_norms.end());
    tail.weights = whole.weights;
    // Weights 5e-4 against the single process: they carry the saving run's own
    // drift (2.7e-4 in GPT-2's MLP c_proj, the same at every resumed layout).
    constexpr double kResumedWeightTol = 5e-4;
    struct Target {
      int dp, pp, tp, zero;
    };
    // 1 x 4 x 2 through the pipeline engine; 8 x 1 x 1 (ZeRO-3) and 2 x 1 x 4
    // through the data-parallel engine.
    for (const Target t : {Target{1, 4, 2, 1}, Target{8, 1, 1, 3}, Target{2, 1, 4, 1}}) {
      Layout l = saved;
      l.dp = t.dp;
      l.pp = t.pp;
      l.tp = t.tp;
      l.zero = t.zero;
      const Span span{kHalf, kHalf, ckpt, ""};
      expect_same_training(t.pp > 1 ? train_pipeline(arch, l, world, span) : train_data_parallel(arch, l, world, span),
                           tail, 1e-5, arch + " 2 x 2 x 2 ZeRO-2 resumed at " + describe(arch, l), true, 1e-5,
                           kResumedWeightTol);
    }
    expect_same_training(train_reference(arch, saved, Span{kHalf, kHalf, ckpt, ""}), tail, 1e-5,
                         arch + " 2 x 2 x 2 ZeRO-2 resumed by the single process", true, 1e-5, kResumedWeightTol);
  }
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_tree(dir);
}

// fp16 at DP x PP x TP = 2 x 2 x 2 (ZeRO-2, sequence parallel): training
// follows the single process's fp16 run (losses within 2%, norms 5%, as bf16),
// and an overflow on one rank only (the last stage's loss made infinite on
// world rank 7: dp 1, tp 1) skips the step on all eight, every one halving its
// loss scale.
TEST(PipelineEngine, ThreeD_Fp16FollowsSingleProcessAndAgreesOnOverflow) {
  const auto& world = test::context().cpu_world;
  if (world->size() != 8) GTEST_SKIP() << "needs 8 ranks";
  Layout l;
  l.dp = 2;
  l.pp = 2;
  l.tp = 2;
  l.zero = 2;
  l.sequence_parallel = true;
  l.precision = "fp16";
  for (const std::string arch : {"gpt2", "llama"})
    expect_same_training(train_pipeline(arch, l, world, Span{0, 8, "", ""}), train_reference(arch, l, Span{0, 8, "", ""}),
                         2e-2, describe(arch, l), /*weights=*/false, /*norm_tol=*/5e-2);

  Config config = Config::from_string(config_json(l), "fp16.json");
  torch::manual_seed(42);
  auto model = models::build_model(model_config("gpt2"), c10::kCPU, tensor_parallel_group(config, sub_context(world)));
  models::CausalLMImpl* lm = model.get();
  int step = 0;
  constexpr int kOverflowStep = 3;
  const bool poisoned = world->rank() == 7;
  Engine<models::CausalLMImpl> engine(
      model, std::make_unique<PipelineStages>(config, model, StageHead{[&](const at::Tensor& out, const at::Tensor& labels) {
        at::Tensor loss = lm->loss(out, labels);
        return step == kOverflowStep && poisoned ? loss * std::numeric_limits<float>::infinity() : loss;
      }}, distributed::ProcessGrid::create(config, sub_context(world))));
  const int r = static_cast<int>(engine.core().dp()->rank());
  for (step = 0; step < 5; ++step) {
    const double before = engine.loss_scale();
    at::Tensor t = step_tokens(step, l.global_batch);
    int k = 0;
    engine.train_batch([&] {
      at::Tensor b = t.narrow(0, (k++ * 2 + r) * 1, 1);
      return MicroBatch{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
    });
    EXPECT_EQ(engine.last_step_skipped(), step == kOverflowStep) << "rank " << world->rank() << " step " << step;
    if (step == kOverflowStep) EXPECT_EQ(engine.loss_scale(), before / 2) << "rank " << world->rank();
  }
  EXPECT_EQ(engine.core().skipped_steps(), 1) << "rank " << world->rank();
}

// DeepSpeed's activation_checkpoint_interval: groups of 1 and 3 layers
// recomputed in backward train as the single process without checkpointing.
TEST(PipelineEngine, ActivationCheckpointIntervalMatchesSingleProcess) {
  for (int interval : {1, 3}) {
    Layout l;
    l.pp = 2;
    l.checkpoint_interval = interval;
    Layout plain = l;
    plain.checkpoint_interval = 0;
    const TrainRun ref = train_reference("gpt2", plain);
    expect_same_training(train_pipeline("gpt2", l, groups_of(2)), ref, 1e-5,
                         describe("gpt2", l) + " checkpoint interval " + std::to_string(interval));
  }
}

// The LM head's loss tiled along the sequence on the last stage
// (tiled_loss_tokens: no [tokens, vocab] logits there), with GPT-2's tied
// head and LLaMA's own, for 1F1B, interleaved (micro-batches' forwards
// between a head's forward and its backward), ZB-H1 and a recomputed head
// (activation_checkpoint_interval): the untiled single process's training,
// evaluation and greedy sample (generation takes the logits): losses and
// gradient norms within 1e-5, final weights 1e-4. On 4 ranks also PP x TP =
// 2 x 2 with sequence parallelism (the loss over each rank's vocabulary
// columns).
TEST(PipelineEngine, TiledLossOnTheLastStageMatchesSingleProcess) {
  const int world = test::context().cpu_world->size();
  for (const std::string arch : {"gpt2", "llama"})
    for (const std::string schedule : {"1f1b", "interleaved", "zb-h1", "checkpointed", "tp-sp"}) {
      if (schedule == "tp-sp" && world < 4) continue;
      Layout l;
      l.pp = 2;
      if (schedule == "tp-sp") l.tp = 2, l.sequence_parallel = true;
      l.tiled_loss = 5;  // 2 rows x 16 tokens a micro-batch: 7 tiles
      l.schedule = schedule == "checkpointed" || schedule == "tp-sp" ? "1f1b" : schedule;
      if (schedule == "interleaved") l.virtual_stages = 2;
      if (schedule == "checkpointed") l.checkpoint_interval = 2;
      Layout plain = l;
      plain.checkpoint_interval = 0;
      const TrainRun ref = train_reference(arch, plain, Span{0, 6, "", "", true});
      const TrainRun got = train_pipeline(arch, l, groups_of(l.pp * l.tp), Span{0, 6, "", "", true});
      const std::string what = describe(arch, l) + " tiled loss" + (l.checkpoint_interval ? " checkpointed" : "");
      // Weights 1e-4: the tiles sum the head's gradients in another order,
      // and Adam's normalised steps carry that into the smallest weights.
      expect_same_training(got, ref, 1e-5, what, /*weights=*/true, /*norm_tol=*/1e-5, /*weight_tol=*/1e-4);
      EXPECT_NEAR(got.eval_loss, ref.eval_loss, 1e-5 * std::abs(ref.eval_loss)) << what;
      EXPECT_EQ(got.sample, ref.sample) << what;
    }
}

// fp16: an overflow on the last stage only (its loss made infinite at one
// step) skips the step on every stage, and every stage halves its loss scale.
TEST(PipelineEngine, Fp16OverflowOnOneStageSkipsTheStepOnEvery) {
  Layout l;
  l.pp = 2;
  std::string json = config_json(l);
  json.replace(json.find('{'), 1, R"({"fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1},)");
  Config config = Config::from_string(json, "fp16.json");
  torch::manual_seed(42);
  auto model = models::build_model(model_config("gpt2"));
  int step = 0;
  constexpr int kOverflowStep = 3;
  Engine<models::CausalLMImpl> engine(
      model, std::make_unique<PipelineStages>(config, model, StageHead{[&](const at::Tensor& out, const at::Tensor& labels) {
        at::Tensor loss = models::causal_lm_loss(out, labels);
        return step == kOverflowStep ? loss * std::numeric_limits<float>::infinity() : loss;
      }}, distributed::ProcessGrid::create(config, sub_context(groups_of(2)))));
  for (step = 0; step < 6; ++step) {
    const double before = engine.loss_scale();
    at::Tensor t = step_tokens(step, l.global_batch);
    int k = 0;
    engine.train_batch([&] {
      at::Tensor b = t.narrow(0, 2 * k++, 2);
      return MicroBatch{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
    });
    EXPECT_EQ(engine.last_step_skipped(), step == kOverflowStep) << "stage " << engine.stage() << " step " << step;
    if (step == kOverflowStep) EXPECT_EQ(engine.loss_scale(), before / 2) << "stage " << engine.stage();
  }
  EXPECT_EQ(engine.core().skipped_steps(), 1);
}

TEST(PipelineEngine, Bf16MatchesSingleProcessWithinTwoPercent) {
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    l.pp = 2;
    l.precision = "bf16";
    const TrainRun ref = train_reference(arch, l);
    // bf16 rounds differently once the step's gradients are summed in another
    // order, and the difference compounds: over 20 steps the losses stay
    // within 2% and the gradient norms within 15% (GPT-2's drift 13% by step
    // 14 at seed 42; within 5% through step 13).
    expect_same_training(train_pipeline(arch, l, groups_of(2)), ref, 2e-2, describe(arch, l), /*weights=*/false,
                         /*norm_tol=*/0.15);
  }
}

TEST(PipelineEngine, BadConfigsFailOnEveryRankWithTheNumbers) {
  auto group = groups_of(2);
  auto error = [&](Layout l, const std::string& extra_model = "") {
    return test::error_of([&] {
      Config config = Config::from_string(config_json(l), "bad.json");
      torch::manual_seed(42);
      auto mc = model_config("gpt2");
      if (!extra_model.empty()) mc = models::make_model_config("tiny-gpt2", {{"layers", extra_model}, {"max_seq_len", "16"}});
      auto model = models::build_model(mc);
      initialize(config, model, sub_context(group));
    });
  };
  Layout three;
  three.pp = 3;
  three.global_batch = 8;
  EXPECT_NE(error(three).find("3 stages do not divide the 2 ranks"), std::string::npos) << error(three);
  Layout many;
  many.pp = 2;
  many.schedule = "interleaved";
  many.virtual_stages = 4;  // 8 virtual stages for 1 + 2 + 2 layers
  EXPECT_NE(error(many, "2").find("the model has 5 layers but 8 pipeline stages"), std::string::npos)
      << error(many, "2");
  Layout few = many;
  few.virtual_stages = 2;
  few.gas = 1;
  few.global_batch = 1;
  EXPECT_NE(error(few).find("is not a multiple of the 2 stages"), std::string::npos) << error(few);
  Layout interval;
  interval.pp = 1;
  interval.checkpoint_interval = 2;
  EXPECT_NE(test::error_of([&] { Config::from_string(config_json(interval), "interval.json"); })
                .find("applies to a pipeline's stages (pipeline.stages > 1)"),
            std::string::npos);
  Layout data_parallel_only;
  data_parallel_only.pp = 2;
  Config config = Config::from_string(config_json(data_parallel_only), "dp.json");
  auto model = models::build_model(model_config("gpt2"));
  EXPECT_NE(test::error_of([&] { initialize(config, model, groups_of(1), c10::Device(c10::kCPU)); })
                .find("build the engine with stratum::initialize over the process grid"),
            std::string::npos);
  // One engine: under stages, forward / backward / step are refused by name; train_batch is the way.
  auto engine = initialize(config, models::build_model(model_config("gpt2")), sub_context(group));
  const std::string refused = test::error_of([&] { engine.forward(at::zeros({1, kSeq}, at::kLong), at::zeros({1, kSeq}, at::kLong)); });
  EXPECT_NE(refused.find("engine.forward: the model is cut into 2 pipeline stages"), std::string::npos) << refused;
  EXPECT_NE(refused.find("engine.train_batch"), std::string::npos) << refused;
}

// A checkpoint saved at PP = 2 x DP = 2 (ZeRO-1, GPT-2 with its tied
// embedding) resumes exactly at the same layout, and at PP = 4, PP = 2 x DP =
// 1 and PP = 1 (the data-parallel engine) continues as the uninterrupted
// single process does (the PP x DP tolerances above). A PP = 1 checkpoint
// resumes at PP = 2 the same way.
TEST(PipelineEngine, CheckpointsResumeAtAnyLayout) {
  auto world = test::context().cpu_world;
  if (world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  // One directory for the job: rank 0's, sent to every rank.
  at::Tensor path = at::zeros({256}, at::kByte);
  if (world->rank() == 0) {
    const std::string dir = fs::make_temp_directory("stratum_pipeline_ckpt_");
    std::memcpy(path.data_ptr(), dir.data(), dir.size());
  }
  world->broadcast(path, 0)->wait();
  const std::string dir(static_cast<const char*>(path.data_ptr()));
  constexpr int kHalf = 5;
  Layout saved;
  saved.pp = 2;
  saved.dp = 2;
  saved.zero = 1;
  const TrainRun whole = train_reference("gpt2", saved, Span{0, 2 * kHalf, "", ""});
  const TrainRun uninterrupted = train_pipeline("gpt2", saved, world, Span{0, 2 * kHalf, "", ""});
  train_pipeline("gpt2", saved, world, Span{0, kHalf, "", dir + "/pp2dp2"});
  TrainRun tail_ref;
  tail_ref.losses.assign(whole.losses.begin() + kHalf, whole.losses.end());
  tail_ref.grad_norms.assign(whole.grad_norms.begin() + kHalf, whole.grad_norms.end());
  tail_ref.weights = whole.weights;

  // The tools read it whole: every tensor checked, every parameter (the tied
  // embedding once) assembled, the layer -> stage map in the manifest.
  const std::string tag_dir = dir + "/pp2dp2/step" + std::to_string(kHalf);
  EXPECT_EQ(verify_checkpoint(tag_dir).shards, 4);
  const ConsolidatedCheckpoint whole_ckpt = read_consolidated_checkpoint(tag_dir);
  EXPECT_EQ(whole_ckpt.tensors.size(), whole.weights.size());
  EXPECT_EQ(whole_ckpt.manifest->pipeline_stages, 2);
  EXPECT_EQ(whole_ckpt.manifest->layer_stages.size(), 9u);
  EXPECT_EQ(whole_ckpt.manifest->layer_stages.front(), 0);
  EXPECT_EQ(whole_ckpt.manifest->layer_stages.back(), 1);
  const TrainRun same = train_pipeline("gpt2", saved, world, Span{kHalf, kHalf, dir + "/pp2dp2", ""});
  for (int i = 0; i < kHalf; ++i) {
    EXPECT_EQ(same.losses[i], uninterrupted.losses[kHalf + i]) << "exact resume, step " << kHalf + i;
    EXPECT_EQ(same.grad_norms[i], uninterrupted.grad_norms[kHalf + i]) << "exact resume, step " << kHalf + i;
  }
  // Resumed at another layout, weights within 1e-4: a layout's reduction order
  // rounds differently, and Adam turns that into weight differences that grow
  // with the steps (up to 6.4e-5 measured on an AVX-512 host after 5 steps).
  constexpr double kResumedWeightTol = 1e-4;
  Layout four = saved;
  four.pp = 4;
  four.dp = 1;
  four.zero = 2;
  expect_same_training(train_pipeline("gpt2", four, world, Span{kHalf, kHalf, dir + "/pp2dp2", ""}), tail_ref, 1e-5,
                       "resumed at pp 4", true, 1e-5, kResumedWeightTol);
  Layout two = saved;
  two.dp = 1;
  two.zero = 0;
  expect_same_training(train_pipeline("gpt2", two, groups_of(2), Span{kHalf, kHalf, dir + "/pp2dp2", ""}), tail_ref,
                       1e-5, "resumed at pp 2 x dp 1", true, 1e-5, kResumedWeightTol);
  expect_same_training(train_reference("gpt2", saved, Span{kHalf, kHalf, dir + "/pp2dp2", ""}), tail_ref, 1e-5,
                       "resumed by the data-parallel engine", true, 1e-5, kResumedWeightTol);
  // And back: the single process's checkpoint into a pipeline (each rank
  // saves the same one, into a directory of its own, and reads that).
  const std::string single = dir + "/pp1_rank" + std::to_string(world->rank());
  train_reference("gpt2", saved, Span{0, kHalf, "", single});
  expect_same_training(train_pipeline("gpt2", two, groups_of(2), Span{kHalf, kHalf, single, ""}), tail_ref,
                       1e-5, "pp 1 checkpoint resumed at pp 2", true, 1e-5, kResumedWeightTol);
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_tree(dir);
}

// Born sharded: a stage of a skeleton draws only its own parameters (the
// others stay unmaterialized, never allocated) and each holds exactly the
// values of the whole model built in one process from the same seed; with
// tensor parallelism inside the stages, its pieces of them.
TEST(PipelineEngine, BornShardedStageDrawsOnlyItsParametersWithTheWholeModelsValues) {
  const int world = test::context().cpu_world->size();
  for (const std::string arch : {"gpt2", "llama"})
    for (const int tp : {1, 2}) {
      if (world % (2 * tp) != 0) continue;
      Layout l;
      l.pp = 2;
      l.tp = tp;
      auto group = groups_of(2 * tp);
      const Config config = Config::from_string(config_json(l), "pipeline");
      torch::manual_seed(42);
      const auto whole = models::build_model(model_config(arch));
      const auto ctx = sub_context(group);
      auto model = models::construct_model(model_config(arch), tensor_parallel_group(config, ctx), c10::kMeta);
      for (const auto& p : model->parameters()) ASSERT_TRUE(nn::is_unmaterialized(p)) << "a skeleton allocates nothing";
      auto engine = initialize(config, model, ctx);
      const std::set<std::string> mine(engine.pipeline()->parameter_names().begin(),
                                       engine.pipeline()->parameter_names().end());
      const auto whole_params = whole->named_parameters();
      int64_t held = 0;
      for (const auto& p : model->named_parameters()) {
        const std::string what = arch + " tp " + std::to_string(tp) + " stage " + std::to_string(engine.stage()) +
                                 ": " + p.key();
        if (!mine.count(p.key())) {
          EXPECT_TRUE(nn::is_unmaterialized(p.value())) << what << " belongs to another stage but was drawn";
          continue;
        }
        ASSERT_FALSE(nn::is_unmaterialized(p.value())) << what;
        held += p.value().numel();
        const at::Tensor& w = *whole_params.find(p.key());
        const auto spec = model->shard_spec(p.key(), model->tensor_parallel().rank());
        const at::Tensor expected = spec ? nn::tp::take_shard(w, *spec) : w;
        EXPECT_TRUE(at::equal(p.value().detach().to(at::kFloat), expected)) << what;
      }
      EXPECT_GT(held, 0);
      EXPECT_LT(held, models::parameter_count(model_config(arch))) << "a stage holds less than the whole model";
    }
}

// Pipeline x ZeRO-3: each stage's parameters partitioned over its
// data-parallel ranks (born sharded: drawn one layer at a time as they are
// partitioned) and gathered layer by layer in every micro-batch's forward and
// backward. GPT-2 (the tied embedding partitioned on both end stages) and
// LLaMA, GPipe, 1F1B and interleaved, with the optimizer on the host too,
// train as the single process: losses and gradient norms within 1e-5. A rank holds
// about 1/dp of its stage's parameters. (ZB-H1 is refused with ZeRO-2 and 3:
// config/validate.cpp.)
TEST(PipelineEngine, PipelineTimesZeRO3_MatchesSingleProcess) {
  const int world = test::context().cpu_world->size();
  const int dp = world >= 4 ? 2 : 1;
  auto group = groups_of(2 * dp);
  for (const std::string arch : {"gpt2", "llama"})
    for (const std::string schedule : {"gpipe", "1f1b", "interleaved"})
      for (const bool offload : {false, true}) {
        if (offload && schedule != "1f1b") continue;
        Layout l;
        l.pp = 2;
        l.dp = dp;
        l.zero = 3;
        l.persistence_threshold = 0;  // every parameter partitioned, however small
        l.offload = offload;
        l.schedule = schedule;
        if (schedule == "interleaved") l.virtual_stages = 2;
        const TrainRun ref = train_reference(arch, l);
        const TrainRun got = train_pipeline(arch, l, group);
        expect_same_training(got, ref, 1e-5, describe(arch, l), /*weights=*/false, /*norm_tol=*/1e-5);
        // Partitioned: at most the stage's share of the model over dp, plus rounding to the ranks.
        const int64_t whole = models::parameter_count(model_config(arch)) * 4;
        EXPECT_LT(got.param_bytes, whole / (2 * dp) + whole / 10) << describe(arch, l);
      }
}

// ZB-H1 with ZeRO 2 and 3: the weight-gradient GEMMs deferred to W write into
// staging buffers held whole until the window closes, then reduced once; a
// stage-3 layer is released at the end of its B (W reads no weight). The same
// training as the single process, with W really deferred.
TEST(PipelineEngine, ZeroBubbleTimesZeRO2And3_MatchesSingleProcess) {
  const int world = test::context().cpu_world->size();
  const int dp = world >= 4 ? 2 : 1;
  auto group = groups_of(2 * dp);
  for (const std::string arch : {"gpt2", "llama"})
    for (const int zero : {2, 3}) {
      Layout l;
      l.pp = 2;
      l.dp = dp;
      l.zero = zero;
      l.persistence_threshold = 0;
      l.schedule = "zb-h1";
      const TrainRun ref = train_reference(arch, l);
      const TrainRun got = train_pipeline(arch, l, group);
      expect_same_training(got, ref, 1e-5, describe(arch, l), /*weights=*/false, /*norm_tol=*/1e-5);
      EXPECT_GT(got.deferred, 0) << describe(arch, l);
      if (zero == 3) {
        const int64_t whole = models::parameter_count(model_config(arch)) * 4;
        EXPECT_LT(got.param_bytes, whole / (2 * dp) + whole / 10) << describe(arch, l);
      }
    }
}

// Evaluation and generation through the stages: after training, the held-out
// loss (forwards alone, a forward-only schedule) and a greedy sample (each
// token's logits from the last stage) match the single process's, at PP 2,
// interleaved PP 2, PP x TP (sequence parallel), PP x DP at ZeRO-3.
TEST(PipelineEngine, EvaluationAndGenerationThroughTheStagesMatchSingleProcess) {
  const int world = test::context().cpu_world->size();
  std::vector<Layout> layouts;
  Layout two;
  two.pp = 2;
  layouts.push_back(two);
  Layout interleaved = two;
  interleaved.schedule = "interleaved";
  interleaved.virtual_stages = 2;
  layouts.push_back(interleaved);
  if (world >= 4) {
    Layout tp = two;
    tp.tp = 2;
    tp.sequence_parallel = true;
    layouts.push_back(tp);
    Layout zero3 = two;
    zero3.dp = 2;
    zero3.zero = 3;
    layouts.push_back(zero3);
  }
  for (const std::string arch : {"gpt2", "llama"})
    for (const Layout& l : layouts) {
      const Span span{0, 3, "", "", /*evaluate=*/true};
      const TrainRun ref = train_reference(arch, l, span);
      const TrainRun got = train_pipeline(arch, l, groups_of(l.pp * l.dp * l.tp), span);
      EXPECT_LE(std::abs(got.eval_loss - ref.eval_loss) / ref.eval_loss, 1e-5)
          << describe(arch, l) << ": eval loss " << got.eval_loss << " vs " << ref.eval_loss;
      EXPECT_EQ(got.sample, ref.sample) << describe(arch, l);
      EXPECT_EQ(got.sample.size(), kPrompt.size() + kSampleTokens);
    }
}

// Checkpoints at any layout with Pipeline x ZeRO-3: saved at PP 2 x DP (ZeRO-3,
// GPT-2's tied embedding partitioned on both end stages), resumed by the
// single process, and the single process's checkpoint resumed at PP 2 x DP
// ZeRO-3, each continuing as the uninterrupted single process (losses and
// norms 1e-5; at ZeRO-3 the parameters are partitioned between steps, so the
// continued losses stand for the restored weights).
TEST(PipelineEngine, PipelineTimesZeRO3CheckpointsResumeAtAnyLayout) {
  auto world = test::context().cpu_world;
  const int dp = world->size() >= 4 ? 2 : 1;
  const std::string dir = test::shared_temp_dir("stratum_pp_zero3_ckpt_");
  constexpr int kHalf = 4;
  Layout l;
  l.pp = 2;
  l.dp = dp;
  l.zero = 3;
  const TrainRun whole = train_reference("gpt2", l, Span{0, 2 * kHalf, "", ""});
  TrainRun tail;
  tail.losses.assign(whole.losses.begin() + kHalf, whole.losses.end());
  tail.grad_norms.assign(whole.grad_norms.begin() + kHalf, whole.grad_norms.end());
  tail.weights = whole.weights;
  train_pipeline("gpt2", l, groups_of(2 * dp), Span{0, kHalf, "", dir + "/pp"});
  expect_same_training(train_reference("gpt2", l, Span{kHalf, kHalf, dir + "/pp", ""}), tail, 1e-5,
                       "pp 2 zero 3 checkpoint resumed by the single process", /*weights=*/false, 1e-5);
  const std::string single = dir + "/single_rank" + std::to_string(world->rank());
  train_reference("gpt2", l, Span{0, kHalf, "", single});
  expect_same_training(train_pipeline("gpt2", l, groups_of(2 * dp), Span{kHalf, kHalf, single, ""}), tail, 1e-5,
                       "single-process checkpoint resumed at pp 2 zero 3", /*weights=*/false, 1e-5);
  world->barrier()->wait();
  if (world->rank() == 0) fs::remove_tree(dir);
}

