// FP8 projections through the engine's parallel layouts, on CPU ranks with
// the FP8 GEMMs emulated (STRATUM_FP8_CPU_EMULATION=1, engine/float8_setup.h),
// against the single-process FP8 run of the same tiny GPT-2 and LLaMA, seed
// and global batch (bf16, tensorwise and rowwise): tensor parallelism with and
// without sequence parallelism (amaxes reduced over the group, so every
// operand is cast with TP = 1's scale), pipeline stages (each stage's weight
// copies invalidated at its step), ZeRO-3 (the weights cast after each
// gather, Wᵀ again in backward), TP x DP, with gradient accumulation and
// activation checkpointing. Tolerances (measured, below) on the losses and
// gradient norms of every step.
//
// Runs under mpirun (CTest: 2 and 4 ranks); each layout runs on a group of the
// world's ranks, the reference on every rank by itself.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdlib>

#include "../distributed/distributed_test_context.h"
#include "dp_groups.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/float8_setup.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/nn/float8/float8_linear.h"
#include "stratum/nn/tensor_parallel/float8_parallel_linear.h"

using namespace stratum;
using stratum::test::groups_of;
using stratum::test::sub_context;

namespace {

constexpr int kSteps = 8;
constexpr int kSeq = 16;

// Layouts whose ranks read the reference's micro-batches whole (TP, SP, PP):
// every FP8 scale is the reference's (ShardedProjectionsCastAsTheWholeOne),
// and what differs is bf16's rounding of sums taken in another order (the
// row-parallel partial products and the column-parallel input gradients
// summed over the group, the bias added after them, the gradient norm over
// stages), which an FP8 cast after the first step turns into a whole FP8
// step where a value sits on a rounding boundary. Measured over 8 steps
// (TP, SP, PP, PP x TP, ZeRO-3 against ZeRO-1 and TP x DP against DP on
// the same rows): losses within 7.8e-4, gradient norms within 4.4e-2; bf16
// alone in the same layouts: 1.2e-4 and 5.1e-3.
constexpr double kLossTol = 2e-3, kNormTol = 8e-2;
// Data parallelism: each rank casts its own rows with their own amax (dynamic
// scaling is per rank, as torchao's), so its scales are not the single
// process's. Measured: losses within 9.6e-4, gradient norms within 4.3e-2.
constexpr double kDataParallelLossTol = 3e-3, kDataParallelNormTol = 1e-1;

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  bool sequence_parallel = false;
  int zero = 0;
  int gas = 2;
  bool checkpointing = false;
  std::string recipe = "tensorwise";
  bool fp8 = true;
  std::string schedule = "1f1b";  // pipeline.schedule
  int virtual_stages = 1;
  int64_t persistence = -1;        // zero_optimization.stage3_param_persistence_threshold (-1: the default)
  std::string all_gather_fp8;      // fp8.all_gather_fp8 ("": unset)
};

std::string describe(const std::string& arch, const Layout& l) {
  return arch + (l.fp8 ? " fp8 " + l.recipe : " bf16") + " tp " + std::to_string(l.tp) +
         (l.sequence_parallel ? " sp" : "") + " pp " + std::to_string(l.pp) + " dp " + std::to_string(l.dp) +
         " zero " + std::to_string(l.zero) + " gas " + std::to_string(l.gas) + (l.checkpointing ? " checkpointed" : "") +
         (l.pp > 1 ? " " + l.schedule : "") +
         (l.persistence >= 0 ? " persistence " + std::to_string(l.persistence) : "") +
         (l.all_gather_fp8.empty() ? "" : " all_gather_fp8 " + l.all_gather_fp8);
}

std::string config_json(const Layout& l) {
  std::string s = R"({"train_batch_size": 8, "gradient_accumulation_steps": )" + std::to_string(l.gas) +
                  R"(, "bf16": {"enabled": true},)";
  if (l.fp8)
    s += R"("fp8": {"enabled": true, "recipe": ")" + l.recipe + "\"" +
         (l.all_gather_fp8.empty() ? "" : R"(, "all_gather_fp8": )" + l.all_gather_fp8) + "},";
  if (l.tp > 1)
    s += R"("tensor_parallel": {"autotp_size": )" + std::to_string(l.tp) +
         (l.sequence_parallel ? R"(, "sequence_parallel": true)" : "") + "},";
  if (l.pp > 1)
    s += R"("pipeline": {"stages": )" + std::to_string(l.pp) + R"(, "schedule": ")" + l.schedule +
         R"(", "virtual_stages": )" + std::to_string(l.virtual_stages) + "},";
  if (l.checkpointing) s += R"("activation_checkpointing": {},)";
  return s + R"(
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0003, "warmup_max_lr": 0.003, "warmup_num_steps": 5}},
    "gradient_clipping": 0.3,
    "zero_optimization": {"stage": )" + std::to_string(l.zero) + R"(, "reduce_bucket_size": 2000)" +
         (l.persistence >= 0 ? R"(, "stage3_param_persistence_threshold": )" + std::to_string(l.persistence) : "") +
         "}}";
}

// 4 layers (2 a stage at PP = 2); a vocabulary of 300, padded at TP = 2.
models::ModelConfig model_config(const std::string& arch) {
  return models::make_model_config(arch == "gpt2" ? "tiny-gpt2" : "tiny-llama",
                                   {{"layers", "4"}, {"max_seq_len", std::to_string(kSeq)}, {"vocab_size", "300"}});
}

struct TrainRun {
  std::vector<double> losses, grad_norms;
  int64_t gathered_bytes = 0;  // ZeRO-3's layer gathers
  std::vector<at::Tensor> params;  // every parameter's value at the end (for_each_full_param), when asked
  int64_t deferred = 0;  // zb-h1: weight-gradient GEMMs this rank deferred from B to W in the last step
};

// Trains on `world` (tp x pp x dp ranks; one: the reference). Data-parallel
// rank r of n takes rows [(k·n + r)·m, ...) of micro-batch k, m = 8 / (gas·n).
TrainRun train(const std::string& arch, const Layout& l, const std::shared_ptr<distributed::Communicator>& world,
               bool read_params = false) {
  Config config = Config::from_string(config_json(l), describe(arch, l));
  const distributed::DistContext ctx = sub_context(world);
  torch::manual_seed(42);
  // A pipeline's model is born sharded (each stage draws its own layers); the same values either way.
  auto model = l.pp > 1 ? models::construct_model(model_config(arch), tensor_parallel_group(config, ctx), c10::kMeta)
                        : models::build_model(model_config(arch), c10::kCPU, tensor_parallel_group(config, ctx));
  auto engine = initialize(config, model, ctx);
  EXPECT_EQ(engine.core().dp()->size(), l.dp) << describe(arch, l);
  const int64_t n = l.dp, r = engine.core().dp()->rank(), m = 8 / (l.gas * n);
  TrainRun run;
  for (int s = 0; s < kSteps; ++s) {
    const at::Tensor t = test::counting_tokens(s, 8, kSeq);
    int64_t k = 0;
    run.losses.push_back(engine.train_batch([&] {
      const at::Tensor b = t.narrow(0, (k * n + r) * m, m);
      ++k;
      return MicroBatch{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
    }));
    run.grad_norms.push_back(engine.core().last_grad_norm());
  }
  if (engine.pipeline()) run.deferred = engine.pipeline()->deferred_weight_gemms();
  if (auto* gatherer = engine.core().strategy().gatherer()) run.gathered_bytes = gatherer->gathered_bytes();
  if (read_params)
    engine.core().strategy().for_each_full_param(
        [&](int, const at::Tensor& v) { run.params.push_back(v.to(at::kCPU, at::kFloat)); });
  return run;
}

TrainRun train_reference(const std::string& arch, Layout l) {
  l.tp = l.pp = l.dp = 1;
  l.sequence_parallel = false;
  l.zero = 0;
  return train(arch, l, groups_of(1));
}

// The largest relative differences of the losses and gradient norms, checked against the tolerances.
std::pair<double, double> expect_close(const std::string& what, const TrainRun& got, const TrainRun& ref,
                                       double loss_tol, double norm_tol) {
  double worst_loss = 0, worst_norm = 0;
  EXPECT_EQ(got.losses.size(), ref.losses.size()) << what;
  for (size_t i = 0; i < std::min(got.losses.size(), ref.losses.size()); ++i) {
    const double dl = std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]);
    const double dn = std::abs(got.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i];
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
    EXPECT_LE(dl, loss_tol) << what << ": loss at step " << i << " " << got.losses[i] << " vs " << ref.losses[i];
    EXPECT_LE(dn, norm_tol) << what << ": gradient norm at step " << i << " " << got.grad_norms[i] << " vs "
                            << ref.grad_norms[i];
  }
  if (test::context().cpu_world->rank() == 0)
    std::printf("[fp8 composition] %s: worst loss %.2e, worst gradient norm %.2e\n", what.c_str(), worst_loss,
                worst_norm);
  return {worst_loss, worst_norm};
}

class Float8Composition : public ::testing::Test {
 protected:
  void SetUp() override { setenv(engine_detail::kFloat8CpuEmulation, "1", /*overwrite=*/1); }
  void TearDown() override { unsetenv(engine_detail::kFloat8CpuEmulation); }
};

// The training layouts of 2 ranks run in the 2-rank job only: in the 4-rank
// one they would repeat it on two groups at once, at twice the time on a
// small machine.
#define SKIP_UNLESS_TWO_RANKS()                                                        \
  if (test::context().cpu_world->size() != 2) GTEST_SKIP() << "runs in the 2-rank job"

double rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kFloat) - b.to(at::kFloat)).norm() / b.to(at::kFloat).norm()).item<double>();
}

// Whether `v` holds on every rank of `group`.
bool on_every_rank(bool v, distributed::Communicator& group) {
  at::Tensor t = at::full({1}, v ? 1.0f : 0.0f);
  group.all_reduce(t, distributed::ReduceOp::min)->wait();
  return t.item<float>() == 1.0f;
}

// One projection split over TP = 2 against the whole one: with the amaxes
// reduced every operand is cast with the whole tensor's scales, so whatever
// no partial sum crosses is bit for bit the whole projection's slice (the
// column-parallel y and dW, the row-parallel dx and dW); the sums over the
// group (column-parallel dx, row-parallel y) are rounded to bf16 per rank
// first. Without the reductions a rank's shard is cast with its own scale.
TEST_F(Float8Composition, ShardedProjectionsCastAsTheWholeOne) {
  namespace f8 = nn::float8;
  auto group = groups_of(2);
  const nn::tp::TensorParallel tp{group, false};
  const int64_t r = group->rank();
  for (const f8::Recipe& recipe : {f8::tensorwise_recipe(), f8::rowwise_recipe()}) {
    SCOPED_TRACE(f8::recipe_name(recipe));
    torch::manual_seed(7);
    const at::Tensor x = torch::randn({32, 64}).to(at::kBFloat16);
    const at::Tensor w = (torch::randn({96, 64}) * torch::rand({96, 1}) * 0.1).to(at::kBFloat16);
    const at::Tensor dy = (torch::randn({32, 96}) * torch::rand({1, 96})).to(at::kBFloat16);
    auto cache = std::make_shared<f8::WeightCache>();
    auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(); };
    f8::Float8Projection whole("whole", recipe, cache);
    const at::Tensor xw = leaf(x), ww = leaf(w);
    const at::Tensor y = f8::float8_linear(xw, {ww}, at::Tensor(), whole);
    y.backward(dy);

    f8::Float8Projection column("column", recipe, cache);
    nn::tp::share_float8_amax(column, f8::SplitAxis::output, tp);
    const at::Tensor xc = leaf(x), wc = leaf(w.narrow(0, r * 48, 48));
    const at::Tensor yc = nn::tp::column_parallel_float8_linear(xc, {wc}, at::Tensor(), column, tp);
    yc.backward(dy.narrow(1, r * 48, 48));
    EXPECT_TRUE(at::equal(yc, y.narrow(1, r * 48, 48))) << rel(yc, y.narrow(1, r * 48, 48));
    EXPECT_TRUE(at::equal(wc.grad(), ww.grad().narrow(0, r * 48, 48)));
    EXPECT_LE(rel(xc.grad(), xw.grad()), 1e-2);

    f8::Float8Projection row("row", recipe, cache);
    nn::tp::share_float8_amax(row, f8::SplitAxis::contraction, tp);
    const at::Tensor xr = leaf(x.narrow(1, r * 32, 32)), wr = leaf(w.narrow(1, r * 32, 32));
    const at::Tensor yr = nn::tp::row_parallel_float8_linear(xr, wr, at::Tensor(), row, tp);
    yr.backward(dy);
    EXPECT_LE(rel(yr, y), 1e-2);
    EXPECT_TRUE(at::equal(xr.grad(), xw.grad().narrow(1, r * 32, 32)));
    EXPECT_TRUE(at::equal(wr.grad(), ww.grad().narrow(1, r * 32, 32)));

    // The control: unshared, some rank's shard is cast otherwise under
    // tensorwise scaling. (Rowwise scales are powers of two: a shard's own
    // scale moves its values by whole exponents, which changes their FP8
    // rounding only where they fall among e4m3's subnormals.)
    if (recipe.scaling != f8::Scaling::tensorwise) continue;
    f8::Float8Projection alone("alone", recipe, cache);
    const at::Tensor ya = nn::tp::row_parallel_float8_linear(x.narrow(1, r * 32, 32), w.narrow(1, r * 32, 32),
                                                             at::Tensor(), alone, tp);
    EXPECT_FALSE(on_every_rank(at::equal(ya, yr), *group));
  }
}

// The emulated single process learns, and its FP8 GEMMs really run: it
// trains differently from bf16.
TEST_F(Float8Composition, ReferenceRunsFp8AndLearns) {
  SKIP_UNLESS_TWO_RANKS();
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    const TrainRun fp8 = train_reference(arch, l);
    EXPECT_LT(fp8.losses.back(), fp8.losses.front()) << arch << " must learn";
    l.fp8 = false;
    const TrainRun bf16 = train_reference(arch, l);
    EXPECT_NE(fp8.losses.back(), bf16.losses.back()) << arch << ": the FP8 GEMMs must run";
  }
}

TEST_F(Float8Composition, TensorParallelMatchesSingleProcess) {
  SKIP_UNLESS_TWO_RANKS();
  auto group = groups_of(2);
  for (const std::string arch : {"gpt2", "llama"})
    for (const std::string recipe : {"tensorwise", "rowwise"}) {
      Layout l;
      l.recipe = recipe;
      const TrainRun ref = train_reference(arch, l);
      l.tp = 2;
      for (bool sp : {false, true}) {
        l.sequence_parallel = sp;
        expect_close(describe(arch, l), train(arch, l, group), ref, kLossTol, kNormTol);
      }
    }
}

// Gradient accumulation over 4 micro-batches and checkpointed blocks (the
// forward recomputed in backward casts the same values again) under TP.
TEST_F(Float8Composition, TensorParallelWithAccumulationAndCheckpointing) {
  SKIP_UNLESS_TWO_RANKS();
  auto group = groups_of(2);
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    l.gas = 4;
    l.checkpointing = true;
    const TrainRun ref = train_reference(arch, l);
    l.tp = 2;
    l.sequence_parallel = true;
    expect_close(describe(arch, l), train(arch, l, group), ref, kLossTol, kNormTol);
  }
}

// 1F1B, GPipe, interleaved (2 virtual stages: a stage's layers in two chunks) and
// zero-bubble (zb-h1: the FP8 projections' dW GEMMs, queued in B with their
// FP8 operands, run in the schedule's W steps into the flat gradients, as
// many as the bf16 model's linears defer), and 1F1B and zb-h1 at ZeRO-3
// (the layers gathered as FP8 bytes).
TEST_F(Float8Composition, PipelineStagesMatchSingleProcess) {
  SKIP_UNLESS_TWO_RANKS();
  auto group = groups_of(2);
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    l.gas = 4;
    const TrainRun ref = train_reference(arch, l);
    l.pp = 2;
    for (const auto& [schedule, chunks, zero] :
         std::vector<std::tuple<std::string, int, int>>{{"1f1b", 1, 0}, {"gpipe", 1, 0}, {"interleaved", 2, 0},
                                                        {"zb-h1", 1, 0}, {"1f1b", 1, 3}, {"zb-h1", 1, 3}}) {
      l.schedule = schedule;
      l.virtual_stages = chunks;
      l.zero = zero;
      // ZeRO-3 inside the stages: each stage's layers gathered as FP8 bytes
      // (norms and biases persistent), released at the end of B under zb-h1.
      l.persistence = zero == 3 ? 300 : -1;
      const TrainRun got = train(arch, l, group);
      expect_close(describe(arch, l), got, ref, kLossTol, kNormTol);
      if (schedule != "zb-h1") continue;
      Layout bf16 = l;
      bf16.fp8 = false;
      const int64_t bf16_deferred = train(arch, bf16, group).deferred;
      if (test::context().cpu_world->rank() == 0)
        std::printf("[fp8 composition] %s: %lld weight GEMMs deferred to W (bf16: %lld)\n", describe(arch, l).c_str(),
                    static_cast<long long>(got.deferred), static_cast<long long>(bf16_deferred));
      EXPECT_GT(got.deferred, 0) << describe(arch, l);
      EXPECT_EQ(got.deferred, bf16_deferred) << describe(arch, l) << ": every projection's dW deferred";
    }
  }
}

// ZeRO-3 on one rank: W cast after each gather and Wᵀ in backward from the
// weight gathered again, nothing kept between uses; the same casts of the
// same values as the cache's.
TEST_F(Float8Composition, ZeRO3OnOneRankMatchesSingleProcess) {
  SKIP_UNLESS_TWO_RANKS();
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    const TrainRun ref = train_reference(arch, l);
    l.zero = 3;
    // Measured 5.2e-4 and 1.8e-2 (bf16 alone: ZeRO-3 sums its gradients
    // otherwise than ZeRO-0, 2.4e-5 and 3.1e-4); the casts themselves are
    // the cache's bit for bit (test_float8: Fp8Layers.UncachedWeightsCastAlike).
    expect_close(describe(arch, l), train(arch, l, groups_of(1)), ref, kLossTol, kNormTol);
  }
}

// ZeRO-3 over 2 data-parallel ranks, also with 4 micro-batches and
// checkpointed blocks (the recompute casts the weight gathered again):
// against ZeRO-1 on the same ranks (the same rows and scales: only where the
// weights come from differs), and against the single process within data
// parallelism's tolerance.
TEST_F(Float8Composition, ZeRO3MatchesZeRO1AndSingleProcess) {
  SKIP_UNLESS_TWO_RANKS();
  auto group = groups_of(2);
  for (const std::string arch : {"gpt2", "llama"})
    for (bool checkpointing : {false, true}) {
      Layout l;
      l.dp = 2;
      l.zero = 1;
      l.gas = checkpointing ? 4 : 2;
      l.checkpointing = checkpointing;
      const TrainRun zero1 = train(arch, l, group);
      l.zero = 3;
      const TrainRun zero3 = train(arch, l, group);
      expect_close(describe(arch, l) + " vs zero 1", zero3, zero1, kLossTol, kNormTol);
      expect_close(describe(arch, l), zero3, train_reference(arch, l), kDataParallelLossTol, kDataParallelNormTol);
    }
}

// ZeRO-3 over 2 ranks gathering the FP8 projections' weights as FP8 bytes,
// against gathering them in bf16 and casting after the gather: the same FP8
// bytes and scales reach every GEMM, so every loss and gradient norm is
// equal bit for bit, and so are the weights read back in bf16 at the end
// (for_each_full_param gathers them apart). A persistence threshold of 300
// keeps the norms and biases whole and leaves each layer's unit only its
// projections' weights: every layer travels in FP8, at one byte an element
// instead of two. At threshold 0 the norms join their layers' units, which
// then stay in bf16: the same bytes as without FP8 gathers. Also with 4
// micro-batches and checkpointed blocks (the recompute reads the gathered
// W again), and against ZeRO-1 on the same ranks.
TEST_F(Float8Composition, ZeRO3Fp8GatherMatchesBf16GatherBitForBit) {
  SKIP_UNLESS_TWO_RANKS();
  auto group = groups_of(2);
  for (const std::string arch : {"gpt2", "llama"})
    for (const auto& [persistence, checkpointing] : std::vector<std::pair<int64_t, bool>>{{300, false}, {300, true},
                                                                                          {0, false}}) {
      Layout l;
      l.dp = 2;
      l.zero = 3;
      l.persistence = persistence;
      l.checkpointing = checkpointing;
      l.gas = checkpointing ? 4 : 2;
      l.all_gather_fp8 = "false";
      const TrainRun bf16_gather = train(arch, l, group, /*read_params=*/true);
      l.all_gather_fp8 = "";  // the default: FP8 wherever a layer holds FP8 weights only
      const TrainRun fp8_gather = train(arch, l, group, /*read_params=*/true);
      const std::string what = describe(arch, l);
      EXPECT_EQ(fp8_gather.losses, bf16_gather.losses) << what;
      EXPECT_EQ(fp8_gather.grad_norms, bf16_gather.grad_norms) << what;
      ASSERT_EQ(fp8_gather.params.size(), bf16_gather.params.size()) << what;
      for (size_t i = 0; i < fp8_gather.params.size(); ++i)
        EXPECT_TRUE(at::equal(fp8_gather.params[i], bf16_gather.params[i])) << what << ": parameter " << i;
      EXPECT_GT(bf16_gather.gathered_bytes, 0) << what << ": the layers must be gathered";
      const double ratio = static_cast<double>(fp8_gather.gathered_bytes) / bf16_gather.gathered_bytes;
      if (persistence == 0) {
        EXPECT_EQ(fp8_gather.gathered_bytes, bf16_gather.gathered_bytes) << what << ": mixed units stay in bf16";
      } else {
        // The layers' units at half; the embedding's unit (bf16) is the rest.
        EXPECT_LT(ratio, 0.75) << what;
        EXPECT_GT(ratio, 0.5) << what;
      }
      if (test::context().cpu_world->rank() == 0)
        std::printf("[fp8 composition] %s: gathered %lld bytes in FP8 against %lld in bf16 (%.3f)\n", what.c_str(),
                    static_cast<long long>(fp8_gather.gathered_bytes),
                    static_cast<long long>(bf16_gather.gathered_bytes), ratio);
      if (persistence > 0 && !checkpointing) {
        Layout z1 = l;
        z1.zero = 1;
        z1.persistence = -1;
        z1.all_gather_fp8 = "";
        expect_close(what + " vs zero 1", fp8_gather, train(arch, z1, group), kLossTol, kNormTol);
      }
    }
}

// The blockwise recipe (1x128 activation and 128x128 weight blocks, the
// products of the dequantized operands on CPU ranks) through the engine: the
// single process learns and trains otherwise than tensorwise; PP 2 and
// ZeRO-3 over 2 ranks (gathered in bf16, W cast after each gather) against
// it and against ZeRO-1. Under TP 2 the tiny models' shards (32 or 64 wide)
// are not whole blocks: refused at start, naming the layer.
TEST_F(Float8Composition, BlockwiseRecipeAcrossLayouts) {
  SKIP_UNLESS_TWO_RANKS();
  auto group = groups_of(2);
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    l.gas = 4;
    l.recipe = "blockwise";
    const TrainRun ref = train_reference(arch, l);
    EXPECT_LT(ref.losses.back(), ref.losses.front()) << arch << " must learn";
    Layout tensorwise = l;
    tensorwise.recipe = "tensorwise";
    EXPECT_NE(ref.losses.back(), train_reference(arch, tensorwise).losses.back()) << arch;
    Layout pp = l;
    pp.pp = 2;
    expect_close(describe(arch, pp), train(arch, pp, group), ref, kLossTol, kNormTol);
    Layout z = l;
    z.dp = 2;
    z.zero = 1;
    const TrainRun zero1 = train(arch, z, group);
    z.zero = 3;
    z.persistence = 300;
    const TrainRun zero3 = train(arch, z, group);
    expect_close(describe(arch, z) + " vs zero 1", zero3, zero1, kLossTol, kNormTol);
    Layout tp = l;
    tp.tp = 2;
    try {
      train(arch, tp, group);
      ADD_FAILURE() << describe(arch, tp) << ": no error";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("fp8.recipe \"blockwise\": layer"), std::string::npos) << what;
      EXPECT_NE(what.find("not whole 128-wide blocks"), std::string::npos) << what;
    }
  }
}

// TP 2 x DP 2 at ZeRO-1, at ZeRO-3 with rowwise scales (Wᵀ cast in
// backward from the gathered shard, its rows' amaxes reduced over the TP
// group), and at ZeRO-3 with tensorwise scales and the layers gathered as
// FP8 bytes (each weight's amax reduced over both groups before the
// gather): against DP 2 alone (the same rows a rank, the same scales) and
// the single process.
TEST_F(Float8Composition, TensorTimesDataParallel) {
  const auto& world = test::context().cpu_world;
  if (world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const std::string arch : {"gpt2", "llama"})
    for (const auto& [zero, recipe] :
         std::vector<std::pair<int, std::string>>{{1, "tensorwise"}, {3, "rowwise"}, {3, "tensorwise"}}) {
      Layout l;
      l.dp = 2;
      l.zero = zero;
      l.recipe = recipe;
      // ZeRO-3 tensorwise: the layers gathered as FP8 bytes, each weight's
      // amax reduced over data and tensor parallelism before the gather.
      if (zero == 3 && recipe == "tensorwise") l.persistence = 300;
      const TrainRun dp2 = train(arch, l, groups_of(2));
      l.tp = 2;
      l.sequence_parallel = true;
      const TrainRun got = train(arch, l, world);
      expect_close(describe(arch, l) + " vs dp 2", got, dp2, kLossTol, kNormTol);
      expect_close(describe(arch, l), got, train_reference(arch, l), kDataParallelLossTol, kDataParallelNormTol);
    }
}

// PP 2 x TP 2: the amax reductions inside each stage's tensor-parallel group.
TEST_F(Float8Composition, PipelineTimesTensorParallel) {
  const auto& world = test::context().cpu_world;
  if (world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const std::string arch : {"gpt2", "llama"}) {
    Layout l;
    const TrainRun ref = train_reference(arch, l);
    l.pp = 2;
    l.tp = 2;
    expect_close(describe(arch, l), train(arch, l, world), ref, kLossTol, kNormTol);
  }
}

}  // namespace
