// The engine training a mixture of experts with its experts split over
// expert-parallel ranks against the single-process engine training the whole
// model: tiny Mixtral (4 experts, top 2, dropless), 20 steps of the same
// global batch and seed, at EP = 2 and 4 (each rank also data parallel for
// the rest of the model), EP 2 x 2 expert-data-parallel ranks at ZeRO-0 to 3,
// with activation checkpointing and the router's z-loss, and (every expert
// on every rank) in 2 pipeline stages and under tensor parallelism, with
// sequence parallelism too (the balancing terms on, over split sequences): losses
// within 1e-5 relative in fp32, gradient norms too (below), each
// rank's parameters (its experts by their names) within 2e-4. A rank holds its experts only:
// its parameter count is the dense part plus 1/EP of the experts'.
// Checkpoints resume at another expert-parallel size, expert biases
// included. LoRA on the experts trains as one process. Mismatched shapes
// fail by key.
//
// Runs under mpirun (CTest: 2 and 4 ranks); each layout runs on a group of
// the world's ranks, the reference on every rank by itself.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "../common/error_of.h"
#include "../distributed/distributed_test_context.h"
#include "dp_groups.h"
#include "shared_temp_dir.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/checkpoint/manifest.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/moe_routing.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/lora.h"
#include "stratum/models/moe_config.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/nn/deferred_init.h"

using namespace stratum;
using stratum::test::groups_of;
using stratum::test::rel_diff;
using stratum::test::sub_context;

namespace {

constexpr int kSteps = 20;
constexpr int kSeq = 16;
constexpr double kWeightTol = 2e-4;  // as the tensor-parallel engine test's (Adam's normalised steps)

struct Layout {
  std::string precision = "fp32";
  int ep = 1, dp = 1;  // dp: every data-parallel rank, the expert-parallel ones included
  int pp = 1, tp = 1;  // a mixture of experts in pipeline stages, or under tensor parallelism (experts replicated)
  bool sequence_parallel = false;  // each tensor-parallel rank routes its slice of the sequences
  int zero = 0;
  bool checkpointing = false;
  double z_loss = 0;
  double aux_loss = 0;
  std::string balancing = "aux_loss";
  double bias_rate = 0;  // aux-loss-free balancing's expert bias
  bool tied = false;     // the LM head reads the token embedding
  int gas = 2;
  int global_batch = 8;
  std::string lora;  // a lora section (JSON), or none
};

std::string config_json(const Layout& l) {
  const std::string pp = l.pp > 1 ? R"("pipeline": {"stages": )" + std::to_string(l.pp) + "}," : "";
  const std::string tp = l.tp > 1 ? R"("tensor_parallel": {"autotp_size": )" + std::to_string(l.tp) +
                                         R"(, "sequence_parallel": )" + (l.sequence_parallel ? "true" : "false") + "},"
                                   : "";
  return R"({"train_batch_size": )" + std::to_string(l.global_batch) + R"(, "gradient_accumulation_steps": )" +
         std::to_string(l.gas) + "," + (l.checkpointing ? R"("activation_checkpointing": {},)" : "") + pp + tp +
         (l.precision == "bf16" ? R"("bf16": {"enabled": true},)" : "") + R"(
    "moe": {"expert_parallel_size": )" + std::to_string(l.ep) + R"(, "aux_loss_coeff": )" + c10::str(l.aux_loss) +
         R"(, "load_balancing": ")" + l.balancing + R"(", "z_loss_coeff": )" +
         c10::str(l.z_loss) + R"(, "expert_bias_update_rate": )" + c10::str(l.bias_rate) + R"(},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0003, "warmup_max_lr": 0.003, "warmup_num_steps": 5}},
    "gradient_clipping": 0.3,)" + (l.lora.empty() ? "" : R"("lora": )" + l.lora + ",") + R"(
    "zero_optimization": {"stage": )" + std::to_string(l.zero) + R"(, "reduce_bucket_size": 2000}})";
}

std::string describe(const Layout& l) {
  return "ep " + std::to_string(l.ep) + " of dp " + std::to_string(l.dp) + " pp " + std::to_string(l.pp) + " tp " +
         std::to_string(l.tp) + (l.sequence_parallel ? " sp" : "") + " zero " + std::to_string(l.zero) +
         (l.checkpointing ? " checkpointed" : "") + (l.z_loss > 0 ? " z-loss" : "") +
         (l.aux_loss > 0 ? " " + l.balancing : "") +
         (l.bias_rate > 0 ? " expert bias" : "") + (l.tied ? " tied" : "") + " " + l.precision +
         (l.lora.empty() ? "" : " lora");
}

models::ModelConfig model_config(const Config& config, bool tied) {
  models::ModelConfig c = models::make_model_config(
      "tiny-mixtral",
      {{"layers", "2"}, {"max_seq_len", std::to_string(kSeq)}, {"tie_embeddings", tied ? "true" : "false"}});
  models::apply_moe_section(c, config.moe, config.source);
  return c;
}

struct TrainRun {
  std::vector<double> losses, grad_norms;
  std::map<std::string, at::Tensor> weights;  // this rank's parameters by name, fp32
  int64_t numel = 0;
  double imbalance = 0;
};

// Steps [first, first + steps), optionally resumed from and saved to a checkpoint.
struct Span {
  int first = 0, steps = kSteps;
  std::string load_dir, save_dir;
};

TrainRun train(const Layout& l, const std::shared_ptr<distributed::Communicator>& world, const Span& span = {}) {
  Config config = Config::from_string(config_json(l), describe(l));
  const distributed::DistContext ctx = sub_context(world);
  const distributed::ProcessGrid grid = distributed::ProcessGrid::create(config, ctx);
  at::manual_seed(42);
  auto model = models::construct_model(model_config(config, l.tied), tensor_parallel_group(config, grid), c10::kMeta,
                                       nn::moe::ExpertParallel{grid.ep_group()});
  if (config.lora.enabled) models::apply_lora(*model, config.lora);
  auto engine = initialize(config, model, grid);
  if (!span.load_dir.empty()) load_checkpoint(engine.core(), span.load_dir);
  EXPECT_EQ(engine.core().data_parallel()->size(), l.dp) << describe(l);
  EXPECT_EQ(engine.core().dp()->size(), l.dp / l.ep) << describe(l);
  TrainRun run;
  if (l.pp == 1) {
    test::train_steps(engine, span.first, span.steps, l.global_batch, l.gas, kSeq, run.losses, run.grad_norms);
  } else {  // a pipeline trains whole steps: micro-batch k of data-parallel rank r of n is rows [(k n + r) m, ...)
    const int64_t n = engine.core().data_parallel()->size(), r = engine.core().data_parallel()->rank();
    const int64_t m = l.global_batch / (l.gas * n);
    for (int s = span.first; s < span.first + span.steps; ++s) {
      const at::Tensor t = test::counting_tokens(s, l.global_batch, kSeq);
      int64_t k = 0;
      run.losses.push_back(engine.train_batch([&] {
        const at::Tensor b = t.narrow(0, (k++ * n + r) * m, m);
        return MicroBatch{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
      }));
      run.grad_norms.push_back(engine.core().last_grad_norm());
    }
  }
  if (!span.save_dir.empty())
    save_checkpoint(engine.core(), span.save_dir, "step" + std::to_string(span.first + span.steps), {});
  engine.core().sync_params();
  for (auto& p : model->named_parameters()) {
    if (nn::is_unmaterialized(p.value())) continue;  // another pipeline stage's
    // A frozen base (LoRA) is not trained; under ZeRO-3 it stays partitioned.
    if (!p.value().requires_grad()) continue;
    run.weights[p.key()] = p.value().detach().to(at::kFloat).clone();
    run.numel += p.value().numel();
  }
  if (const RoutingStats* stats = routing_stats(engine.core())) run.imbalance = stats->imbalance;
  return run;
}

// `norm_tol`: 1e-5 in fp32 (CPU norms sum their squares in double, so a
// rank's buckets and one process's give the same norm: EP 2 and 4 measured
// within 1.8e-6 over 20 steps). `loss_tol`: bf16's; `weight_tol` 0: the
// weights not compared (bf16's drift apart).
void expect_same_training(const Layout& l, const TrainRun& got, const TrainRun& ref, double norm_tol = 1e-5,
                          double loss_tol = 1e-5, double weight_tol = kWeightTol) {
  const std::string what = describe(l);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]), loss_tol)
        << what << ": loss at step " << i << " " << got.losses[i] << " vs " << ref.losses[i];
    EXPECT_LE(std::abs(got.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i], norm_tol)
        << what << ": gradient norm at step " << i << " " << got.grad_norms[i] << " vs " << ref.grad_norms[i];
  }
  const models::ModelConfig mc = models::preset("tiny-mixtral");
  for (const auto& [name, w] : weight_tol > 0 ? got.weights : std::map<std::string, at::Tensor>{}) {
    auto it = ref.weights.find(name);
    ASSERT_NE(it, ref.weights.end()) << what << ": " << name;
    const auto spec = models::shard_spec(mc, name, l.tp, test::context().cpu_world->rank() % l.tp);
    const at::Tensor want = spec ? nn::tp::take_shard(it->second, *spec) : it->second;
    EXPECT_LE(rel_diff(w, want), weight_tol) << what << ": final " << name;
  }
  // A pipeline's stages see their own layers' load; bf16 may route a token otherwise.
  if (l.pp == 1 && l.precision == "fp32") EXPECT_NEAR(got.imbalance, ref.imbalance, 1e-9) << what << ": the last step's expert load";
}

TrainRun reference(Layout l, const Span& span = {}) {
  l.ep = l.dp = l.pp = l.tp = 1;
  l.zero = 0;
  return train(l, groups_of(1), span);
}

}  // namespace

TEST(ExpertParallelEngine, ExpertParallel_MatchesSingleProcess_Fp32) {
  const int world = test::context().cpu_world->size();
  const TrainRun ref = reference(Layout{});
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference must learn";
  EXPECT_GT(ref.imbalance, 1.0);
  const models::ModelConfig mc = models::preset("tiny-mixtral");
  const int64_t expert = 3 * mc.hidden * mc.moe_ffn_hidden, all_experts = 2 * mc.num_experts * expert;
  for (int ep = 2; ep <= world; ep *= 2) {
    Layout l;
    l.ep = l.dp = ep;
    const TrainRun got = train(l, groups_of(ep));
    expect_same_training(l, got, ref);
    EXPECT_EQ(got.numel, ref.numel - all_experts + all_experts / ep) << "a rank holds its experts only";
  }
}

TEST(ExpertParallelEngine, ExpertParallelWithDataParallelZeroStages) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const TrainRun ref = reference(Layout{});
  for (int zero : {0, 1, 2, 3}) {
    Layout l;
    l.ep = 2;
    l.dp = 4;
    l.zero = zero;
    expect_same_training(l, train(l, groups_of(4)), ref);
  }
}

// A checkpoint saved with the experts over every rank (EP = world, ZeRO-1,
// the expert biases of aux-loss-free balancing moving) holds each expert once
// and the biases; it resumes exactly at its own layout, and at EP = 2 (ZeRO-3)
// and in one process within the tolerances of another reduction order.
TEST(ExpertParallelEngine, CheckpointsResumeAtAnotherExpertParallelSize) {
  const auto& world = test::context().cpu_world;
  const int n = world->size();
  const std::string dir = test::shared_temp_dir("stratum_ep_ckpt_");
  constexpr int kHalf = 5;
  Layout saved;
  saved.ep = saved.dp = n;
  saved.zero = 1;
  saved.bias_rate = 1e-2;
  const TrainRun whole = reference(saved, Span{0, 2 * kHalf, "", ""});
  const TrainRun uninterrupted = train(saved, world, Span{0, 2 * kHalf, "", ""});
  train(saved, world, Span{0, kHalf, "", dir});
  const std::string tag_dir = dir + "/step" + std::to_string(kHalf);
  EXPECT_EQ(verify_checkpoint(tag_dir).shards, n);
  const ConsolidatedCheckpoint c = read_consolidated_checkpoint(tag_dir);
  EXPECT_EQ(c.manifest->expert_parallel_size, n);
  EXPECT_EQ(c.tensors.size(), whole.weights.size()) << "every expert of every layer, once";

  const TrainRun same = train(saved, world, Span{kHalf, kHalf, dir, ""});
  for (int i = 0; i < kHalf; ++i) {
    EXPECT_EQ(same.losses[i], uninterrupted.losses[kHalf + i]) << "exact resume, step " << kHalf + i;
    EXPECT_EQ(same.grad_norms[i], uninterrupted.grad_norms[kHalf + i]) << "exact resume, step " << kHalf + i;
  }
  TrainRun tail;
  tail.losses.assign(whole.losses.begin() + kHalf, whole.losses.end());
  tail.grad_norms.assign(whole.grad_norms.begin() + kHalf, whole.grad_norms.end());
  tail.weights = whole.weights;
  tail.imbalance = whole.imbalance;
  std::vector<std::pair<Layout, std::shared_ptr<distributed::Communicator>>> others;
  Layout one;  // every expert here
  one.bias_rate = saved.bias_rate;
  others.push_back({one, groups_of(1)});
  if (n >= 4) {
    Layout two;
    two.bias_rate = saved.bias_rate;
    two.ep = 2;
    two.dp = 2;
    two.zero = 3;
    others.push_back({two, groups_of(2)});
  }
  for (const auto& [l, group] : others) {
    SCOPED_TRACE(describe(l));
    expect_same_training(l, train(l, group, Span{kHalf, kHalf, dir, ""}), tail);
  }
}

TEST(ExpertParallelEngine, CheckpointedLayersAndTheZLoss) {
  Layout base;
  base.z_loss = 1e-3;
  const TrainRun ref = reference(base);
  Layout l = base;
  l.ep = l.dp = 2;
  l.checkpointing = true;
  expect_same_training(l, train(l, groups_of(2)), ref);
}

// A mixture of experts (every expert on every rank) in 2 pipeline stages, and
// under tensor parallelism (attention split, the experts replicated), trains
// as one process: the balancing terms' gradients reach the router on every
// stage at the loss's factor.
TEST(ExpertParallelEngine, MixtureOfExpertsInPipelineStagesAndUnderTensorParallelism) {
  Layout base;
  base.z_loss = 1e-3;
  const TrainRun ref = reference(base);
  Layout pp = base;
  pp.pp = 2;
  expect_same_training(pp, train(pp, groups_of(2)), ref);
  Layout tp = base;
  tp.tp = 2;
  expect_same_training(tp, train(tp, groups_of(2)), ref);
}

// Under sequence parallelism (TP 2 with SP on 2 ranks) each rank routes its
// half of every sequence through its replicated experts; the balancing terms
// are the whole micro-batch's from the counts gathered over the pair. With the
// auxiliary loss (per micro-batch and per sequence), the z-loss and the
// aux-loss-free bias all on, it trains as one process (losses and norms 1e-5,
// the last step's expert load equal); on 4 ranks with EP 2 too (no auxiliary
// loss there: each data-parallel rank's micro-batch is half the reference's,
// and the term is per micro-batch).
TEST(ExpertParallelEngine, SequenceParallelRanksRouteTheirSlicesAsOneProcess) {
  for (const std::string balancing : {"aux_loss", "seq_aux_loss"}) {
    Layout base;
    base.z_loss = 1e-3;
    base.aux_loss = 1e-2;
    base.balancing = balancing;
    base.bias_rate = 1e-3;
    const TrainRun ref = reference(base);
    Layout l = base;
    l.tp = 2;
    l.sequence_parallel = true;
    expect_same_training(l, train(l, groups_of(2)), ref);
  }
  if (test::context().cpu_world->size() < 4) return;
  Layout base;
  base.z_loss = 1e-3;
  const TrainRun ref = reference(base);
  Layout l = base;
  l.tp = 2;
  l.sequence_parallel = true;
  l.ep = l.dp = 2;
  l.zero = 2;
  expect_same_training(l, train(l, groups_of(4)), ref);
}

// Experts split over 2 expert-parallel ranks of each tensor-parallel index
// (TP 2 x EP 2 on 4 ranks): attention split, the experts replicated over
// tensor parallelism and split over expert parallelism.
TEST(ExpertParallelEngine, ExpertParallelWithTensorParallelism) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const TrainRun ref = reference(Layout{});
  Layout l;
  l.tp = 2;
  l.ep = l.dp = 2;
  l.zero = 1;
  expect_same_training(l, train(l, groups_of(4)), ref);
}

// Experts split over 2 expert-parallel ranks in each of 2 pipeline stages
// (PP 2 x EP 2 on 4 ranks), at ZeRO-0 (the tied embedding's gradient summed
// between the stages' ranks of one data-parallel index) and ZeRO-1 (between
// the pieces of one expert index's ranks).
TEST(ExpertParallelEngine, ExpertParallelInPipelineStages) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  Layout base;
  base.tied = true;
  const TrainRun ref = reference(base);
  for (int zero : {0, 1}) {
    Layout l = base;
    l.pp = 2;
    l.ep = l.dp = 2;
    l.zero = zero;
    expect_same_training(l, train(l, groups_of(4)), ref);
  }
}

// LoRA on the experts (and q_proj), the base frozen: each rank trains the
// adapters of its own experts, at EP 2, at EP 2 x DP 2 under ZeRO-3 with
// checkpointed layers, and at EP 2 x TP 2 with sequence parallelism (the
// replicated experts' adapters summed over the group).
TEST(ExpertParallelEngine, ExpertAdaptersTrainAsOneProcess) {
  const int world = test::context().cpu_world->size();
  Layout base;
  base.lora = R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "w1", "w3", "w2"]})";
  const TrainRun ref = reference(base);
  EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the adapters must learn";
  // The adapters moved from peft's zero B; the base did not.
  const at::Tensor& b = ref.weights.at("model.layers.1.block_sparse_moe.experts.3.w2.lora_B.weight");
  EXPECT_GT(b.abs().max().item<double>(), 0.0);
  std::vector<Layout> layouts;
  Layout ep = base;
  ep.ep = ep.dp = 2;
  layouts.push_back(ep);
  if (world >= 4) {
    Layout zero3 = base;
    zero3.ep = 2, zero3.dp = 4, zero3.zero = 3, zero3.checkpointing = true;
    Layout tp = base;
    tp.ep = tp.dp = 2, tp.tp = 2, tp.sequence_parallel = true;
    layouts.insert(layouts.end(), {zero3, tp});
  }
  for (const Layout& l : layouts) expect_same_training(l, train(l, groups_of(l.dp * l.tp)), ref);
}

// bf16 (fp32 masters): EP = 2 against one process within bf16's tolerances.
TEST(ExpertParallelEngine, ExpertParallelInBf16) {
  Layout base;
  base.precision = "bf16";
  const TrainRun ref = reference(base);
  Layout l = base;
  l.ep = l.dp = 2;
  l.zero = 2;
  expect_same_training(l, train(l, groups_of(2)), ref, 5e-2, 2e-2, 0);
}

// A peft adapter of the whole model fits each expert-parallel rank: the
// adapters of the experts another rank holds are that rank's to load, while
// an expert no rank holds, or a wrong shape, is still named.
TEST(ExpertParallelEngine, AWholeAdapterFitsEachExpertParallelRank) {
  Config config = Config::from_string(R"({"train_batch_size": 4, "moe": {"expert_parallel_size": 2},
      "lora": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "w1", "w3", "w2"]}})", "ep-lora.json");
  const distributed::ProcessGrid grid = distributed::ProcessGrid::create(config, sub_context(groups_of(2)));
  auto split = models::construct_model(model_config(config, false), {}, c10::kMeta,
                                       nn::moe::ExpertParallel{grid.ep_group()});
  models::apply_lora(*split, config.lora);
  Config one = config;
  one.moe.expert_parallel_size = 1;
  auto whole = models::construct_model(model_config(one, false), {}, c10::kMeta);
  models::apply_lora(*whole, one.lora);
  std::vector<std::pair<std::string, at::Tensor>> adapter;
  for (const auto& item : whole->named_parameters())
    if (models::is_lora_parameter(item.key())) adapter.emplace_back(item.key(), at::zeros(item.value().sizes()));
  EXPECT_EQ(models::adapter_mismatches(*split, config.lora, config.lora, adapter), std::vector<std::string>{});
  adapter.emplace_back("model.layers.0.block_sparse_moe.experts.9.w1.lora_A.weight", at::zeros({4, 64}));
  adapter.front().second = at::zeros({3, 3});
  const auto problems = models::adapter_mismatches(*split, config.lora, config.lora, adapter);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("is [3, 3], the model's"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("experts.9.w1.lora_A.weight' is not a parameter"), std::string::npos) << problems[1];
}

TEST(ExpertParallelEngine, ShapesThatDoNotSplitAreNamed) {
  const std::string bad = test::error_of([] {
    Config config = Config::from_string(R"({"train_batch_size": 4, "moe": {"num_experts": 4, "expert_parallel_size": 3}})",
                                        "bad.json");
  });
  EXPECT_NE(bad.find("moe.expert_parallel_size"), std::string::npos) << bad;
  EXPECT_NE(bad.find("does not divide num_experts (4)"), std::string::npos) << bad;
  const std::string dense = test::error_of([] {
    models::ModelConfig c = models::preset("tiny-llama");
    config::MoeConfig moe;
    moe.present = true;
    models::apply_moe_section(c, moe, "dense.json");
  });
  EXPECT_NE(dense.find("is dense"), std::string::npos) << dense;
  const std::string top_k = test::error_of([] {
    models::ModelConfig c = models::preset("tiny-mixtral");
    config::MoeConfig moe;
    moe.present = true;
    moe.top_k = 3;
    models::apply_moe_section(c, moe, "k.json");
  });
  EXPECT_NE(top_k.find("moe.top_k is 3"), std::string::npos) << top_k;
}
