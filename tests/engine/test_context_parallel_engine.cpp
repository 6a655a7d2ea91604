// Context parallelism against one process. Attention alone: each method's
// output and q/k/v gradients over the ranks' parts of the sequence equal
// SDPA's over the whole sequence (fp32, 1e-5), grouped heads and packed rows
// included. Then the engine: tiny LLaMA trained 20 steps of the same global
// batch and seed with each sequence split over CP = 2 and 4 ranks (Ulysses,
// ring, hybrid), with packed documents, with data parallelism at ZeRO 0-3,
// the optimizer on the host and activation checkpointing, under tensor
// parallelism (sequence parallel) and in pipeline stages, GPT-2's learned
// positions too: losses and gradient norms within 1e-5 relative,
// every parameter within 2e-4 of the single process's; a mixture of experts
// too, its balancing terms on, its experts split by expert parallelism as
// well. A rank holds T / CP
// tokens of activations. Bad shapes fail by key and number.
//
// Runs under mpirun (CTest: 2 and 4 ranks); each layout runs on a group of
// the world's ranks, the reference on every rank by itself.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <malloc.h>

#include <array>

#include "../common/error_of.h"
#include "../distributed/distributed_test_context.h"
#include "dp_groups.h"
#include "stratum/engine/context_shard.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/moe_config.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/nn/attention.h"
#include "stratum/nn/deferred_init.h"

using namespace stratum;
using stratum::test::groups_of;
using stratum::test::rel_diff;
using stratum::test::sub_context;

namespace {

constexpr int kSteps = 20;
constexpr int kSeq = 32;
constexpr double kWeightTol = 2e-4;  // Adam's normalised steps, as the other engine tests'

struct Layout {
  std::string preset = "tiny-llama";
  int cp = 1, dp = 1;  // dp: every data-parallel rank, the context-parallel ones included
  std::string method = "ring";
  int ulysses = 1;  // hybrid's
  int pp = 1, tp = 1;
  bool sequence_parallel = false;
  int zero = 0;
  bool checkpointing = false;
  bool offload = false;  // the optimizer on the host
  bool packed = false;   // rows of several documents
  int kv_heads = 2;
  int gas = 2;
  int global_batch = 8;
  std::string balancing;  // a mixture of experts' (tiny-mixtral): "aux_loss" or "seq_aux_loss"
  int ep = 1;             // its experts over this many of the data-parallel ranks
};

std::string config_json(const Layout& l) {
  const std::string pp = l.pp > 1 ? R"("pipeline": {"stages": )" + std::to_string(l.pp) + "}," : "";
  const std::string tp = l.tp > 1 ? R"("tensor_parallel": {"autotp_size": )" + std::to_string(l.tp) +
                                        (l.sequence_parallel ? R"(, "sequence_parallel": true)" : "") + "},"
                                  : "";
  const std::string cp = l.cp > 1 ? R"("context_parallel": {"size": )" + std::to_string(l.cp) + R"(, "method": ")" +
                                        l.method + "\"" +
                                        (l.method == "hybrid" ? R"(, "ulysses_size": )" + std::to_string(l.ulysses)
                                                              : "") +
                                        "},"
                                  : "";
  // The balancing terms all on: the auxiliary loss, the z-loss and the aux-loss-free bias.
  const std::string moe = l.balancing.empty() ? "" : R"("moe": {"aux_loss_coeff": 0.01, "z_loss_coeff": 0.001, )"
                                                     R"("expert_bias_update_rate": 0.001, "load_balancing": ")" +
                                                         l.balancing + "\", \"expert_parallel_size\": " +
                                                         std::to_string(l.ep) + "},";
  return R"({"train_batch_size": )" + std::to_string(l.global_batch) + R"(, "gradient_accumulation_steps": )" +
         std::to_string(l.gas) + "," + (l.checkpointing ? R"("activation_checkpointing": {},)" : "") + pp + tp + cp +
         moe +
         R"(
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0003, "warmup_max_lr": 0.003, "warmup_num_steps": 5}},
    "gradient_clipping": 0.3,
    "zero_optimization": {"stage": )" +
         std::to_string(l.zero) + R"(, "reduce_bucket_size": 2000)" +
         (l.offload ? R"(, "offload_optimizer": {"device": "cpu"})" : "") + "}}";
}

std::string describe(const Layout& l) {
  return l.preset + " cp " + std::to_string(l.cp) + " " + l.method +
         (l.method == "hybrid" ? " (ulysses " + std::to_string(l.ulysses) + ")" : "") + " of dp " +
         std::to_string(l.dp) + " pp " + std::to_string(l.pp) + " tp " + std::to_string(l.tp) +
         (l.sequence_parallel ? " sp" : "") + " zero " + std::to_string(l.zero) +
         (l.checkpointing ? " checkpointed" : "") + (l.offload ? " offload" : "") + (l.packed ? " packed" : "") +
         " kv " + std::to_string(l.kv_heads) + (l.balancing.empty() ? "" : " " + l.balancing) +
         (l.ep > 1 ? " ep " + std::to_string(l.ep) : "");
}

models::ModelConfig model_config(const Layout& l) {
  std::vector<std::pair<std::string, std::string>> o{{"layers", "2"}, {"max_seq_len", std::to_string(kSeq)}};
  if (l.preset == "tiny-llama") o.push_back({"kv_heads", std::to_string(l.kv_heads)});
  return models::make_model_config(l.preset, o);
}

// Step s's rows of documents: each row cut at two places of its own (a new
// document starts there, positions from 0).
void pack_documents(MicroBatch& b, int step, int64_t first_row) {
  const int64_t rows = b.inputs.size(0), t = b.inputs.size(1);
  b.segment_ids = at::zeros({rows, t}, at::kInt);
  b.position_ids = at::zeros({rows, t}, at::kLong);
  auto segments = b.segment_ids.accessor<int32_t, 2>();
  auto positions = b.position_ids.accessor<int64_t, 2>();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = first_row + i, cut1 = 3 + (step * 5 + row * 7) % 11, cut2 = cut1 + 4 + (step + row) % 9;
    int32_t seg = 0;
    int64_t start = 0;
    for (int64_t p = 0; p < t; ++p) {
      if (p == cut1 || p == cut2) {
        ++seg;
        start = p;
      }
      segments[i][p] = seg;
      positions[i][p] = p - start;
    }
  }
}

struct TrainRun {
  std::vector<double> losses, grad_norms;
  std::map<std::string, at::Tensor> weights;  // this rank's parameters by name, fp32
};

TrainRun train(const Layout& l, const std::shared_ptr<distributed::Communicator>& world) {
  Config config = Config::from_string(config_json(l), describe(l));
  const distributed::DistContext ctx = sub_context(world);
  const distributed::ProcessGrid grid = distributed::ProcessGrid::create(config, ctx);
  at::manual_seed(42);
  models::ModelConfig mc = model_config(l);
  if (config.moe.present) models::apply_moe_section(mc, config.moe, config.source);
  auto model = models::construct_model(mc, tensor_parallel_group(config, grid), c10::kMeta,
                                       nn::moe::ExpertParallel{grid.ep_group()});
  auto engine = initialize(config, model, grid);
  EXPECT_EQ(engine.core().data_parallel()->size(), l.dp) << describe(l);
  EXPECT_EQ(engine.context_parallel().size(), l.cp) << describe(l);
  EXPECT_EQ(engine.core().dp()->size(), l.dp / l.ep) << describe(l) << ": the ranks holding the same experts";
  // Every rank of a context-parallel group reads the same rows; the engine keeps its part.
  const int64_t n = grid.data_replicas(), r = grid.data_replica();
  const int64_t m = l.global_batch / (l.gas * n);
  TrainRun run;
  for (int s = 0; s < kSteps; ++s) {
    const at::Tensor t = test::counting_tokens(s, l.global_batch, kSeq);
    int64_t k = 0;
    run.losses.push_back(engine.train_batch([&] {
      const int64_t first = (k++ * n + r) * m;
      const at::Tensor b = t.narrow(0, first, m);
      MicroBatch mb{b.narrow(1, 0, kSeq), b.narrow(1, 1, kSeq)};
      if (l.packed) pack_documents(mb, s, first);
      return mb;
    }));
    run.grad_norms.push_back(engine.core().last_grad_norm());
  }
  engine.core().sync_params();
  for (auto& p : model->named_parameters()) {
    if (nn::is_unmaterialized(p.value())) continue;  // another pipeline stage's
    run.weights[p.key()] = p.value().detach().to(at::kFloat).clone();
  }
  return run;
}

void expect_same_training(const Layout& l, const TrainRun& got, const TrainRun& ref) {
  const std::string what = describe(l);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_LE(std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]), 1e-5)
        << what << ": loss at step " << i << " " << got.losses[i] << " vs " << ref.losses[i];
    EXPECT_LE(std::abs(got.grad_norms[i] - ref.grad_norms[i]) / ref.grad_norms[i], 1e-5)
        << what << ": gradient norm at step " << i << " " << got.grad_norms[i] << " vs " << ref.grad_norms[i];
  }
  const models::ModelConfig mc = model_config(l);
  for (const auto& [name, w] : got.weights) {
    auto it = ref.weights.find(name);
    ASSERT_NE(it, ref.weights.end()) << what << ": " << name;
    const auto spec = models::shard_spec(mc, name, l.tp, test::context().cpu_world->rank() % l.tp);
    const at::Tensor want = spec ? nn::tp::take_shard(it->second, *spec) : it->second;
    EXPECT_LE(rel_diff(test::without_key_bias(name, w), test::without_key_bias(name, want)), kWeightTol)
        << what << ": final " << name;
  }
}

TrainRun reference(Layout l) {
  l.cp = l.dp = l.pp = l.tp = l.ep = 1;
  l.sequence_parallel = false;
  l.zero = 0;
  l.checkpointing = false;
  l.offload = false;
  return train(l, groups_of(1));
}

// --- attention alone --------------------------------------------------------------

struct Grid1D {
  Config config;
  std::optional<distributed::ProcessGrid> grid;
};

// Each method's attention over `cp` ranks (the world's first) against SDPA
// over the whole sequence: output and gradients at this rank's positions.
// `tile_rows` > 0: the ring's masked blocks that many query rows at a time.
void check_attention(const std::string& method, int cp, int ulysses, int kv_heads, bool packed, int64_t tile_rows = 0) {
  const auto group = groups_of(cp);
  Grid1D g;
  g.config = Config::from_string(R"({"train_batch_size": )" + std::to_string(cp) +
                                     R"(, "context_parallel": {"size": )" + std::to_string(cp) +
                                     R"(, "method": ")" + method + "\"" +
                                     (method == "hybrid" ? R"(, "ulysses_size": )" + std::to_string(ulysses) : "") +
                                     "}}",
                                 method);
  g.grid.emplace(distributed::ProcessGrid::create(g.config, sub_context(group)));
  const nn::cp::ContextParallel cpg = engine_detail::context_parallel_of(g.config, *g.grid);
  const int64_t b = 2, h = 4, t = 16, d = 8;
  at::manual_seed(7);
  const at::Tensor q = at::randn({b, h, t, d}), k = at::randn({b, kv_heads, t, d}), v = at::randn({b, kv_heads, t, d});
  const at::Tensor dout = at::randn({b, h, t, d});
  MicroBatch whole{at::zeros({b, t}, at::kLong), at::zeros({b, t}, at::kLong)};
  if (packed) pack_documents(whole, 3, 0);
  const std::optional<nn::SequenceLayout> layout =
      engine_detail::micro_batch_layout(whole, 0, "attention", c10::kCPU);
  // The reference over the whole sequence.
  const at::Tensor qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(), vr = v.clone().requires_grad_();
  const at::Tensor want = nn::causal_attention(qr, kr, vr, 0.0, layout ? &*layout : nullptr);
  want.backward(dout);
  // This rank's part.
  MicroBatch part = engine_detail::context_shard(whole, cpg, 1, 0, "attention", c10::kCPU);
  if (tile_rows > 0) {
    auto tiled = std::make_shared<nn::cp::ContextShard>(*part.context);
    tiled->masked_tile_rows = tile_rows;
    part.context = tiled;
  }
  const at::Tensor mine = at::tensor(nn::cp::rank_positions(t, cpg.split(), cpg.rank()), at::kLong);
  auto cut = [&](const at::Tensor& x) { return x.index_select(2, mine).clone().requires_grad_(); };
  const at::Tensor ql = cut(q), kl = cut(k), vl = cut(v);
  const nn::SequenceLayout local = *engine_detail::micro_batch_layout(part, 0, "attention", c10::kCPU);
  const at::Tensor got = nn::causal_attention(ql, kl, vl, 0.0, &local);
  got.backward(dout.index_select(2, mine));
  const std::string what = method + " cp " + std::to_string(cp) + " kv " + std::to_string(kv_heads) +
                           (packed ? " packed" : "") + (tile_rows > 0 ? " tiles of " + std::to_string(tile_rows) : "");
  EXPECT_LE(rel_diff(got, want.detach().index_select(2, mine)), 1e-5) << what << ": output";
  EXPECT_LE(rel_diff(ql.grad(), qr.grad().index_select(2, mine)), 1e-5) << what << ": dq";
  EXPECT_LE(rel_diff(kl.grad(), kr.grad().index_select(2, mine)), 1e-5) << what << ": dk";
  EXPECT_LE(rel_diff(vl.grad(), vr.grad().index_select(2, mine)), 1e-5) << what << ": dv";
}

size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Bytes a transformer block's forward leaves allocated for backward (the
// heap in use after the forward, less before: PyTorch's CPU allocator returns
// what it frees at once; a model of 4 blocks less one of 2, over 2), with the
// micro-batch whole or split by `cp` (null: whole).
double kept_per_block(const nn::cp::ContextParallel* cp) {
  constexpr int64_t kRows = 2, kLength = 256;
  double kept[2];
  for (int64_t layers : {2, 4}) {
    at::manual_seed(0);
    auto model = models::build_model(
        models::make_model_config("tiny-llama", {{"layers", std::to_string(layers)},
                                                 {"hidden", "128"},
                                                 {"kv_heads", "4"},
                                                 {"ffn_hidden", "512"},
                                                 {"max_seq_len", std::to_string(kLength)}}),
        c10::kCPU);
    model->train();
    const at::Tensor t = test::counting_tokens(0, kRows, kLength);
    MicroBatch b{t.narrow(1, 0, kLength), t.narrow(1, 1, kLength)};
    std::optional<nn::SequenceLayout> layout;
    if (cp) {
      b = engine_detail::context_shard(b, *cp, 1, 0, "activations", c10::kCPU);
      layout = engine_detail::micro_batch_layout(b, 0, "activations", c10::kCPU);
    }
    nn::SequenceLayoutScope scope(model->sequence_layout().get(), layout);
    model->forward(b.inputs, b.labels).backward();  // what the first step allocates for good (gradients)
    const size_t before = heap_in_use();
    at::Tensor loss = model->forward(b.inputs, b.labels);
    const size_t after = heap_in_use();
    loss.backward();
    kept[layers == 4] = static_cast<double>(after) - static_cast<double>(before);
  }
  return (kept[1] - kept[0]) / 2;
}

}  // namespace

// Scale: a context-parallel rank keeps the activations of its own tokens only
// (measured on the heap: a block's bytes at CP = world within 10% of 1 / CP
// of the whole sequence's, 256 tokens).
TEST(ContextParallelActivations, ARankKeepsItsPartOfTheSequence) {
  const int world = test::context().cpu_world->size();
  const double whole = kept_per_block(nullptr);
  for (const std::string method : {"ring", "ulysses"}) {
    const Config config = Config::from_string(
        R"({"train_batch_size": )" + std::to_string(world) + R"(, "context_parallel": {"size": )" +
            std::to_string(world) + R"(, "method": ")" + method + "\"}}",
        method);
    const distributed::ProcessGrid grid = distributed::ProcessGrid::create(config, sub_context(groups_of(world)));
    const nn::cp::ContextParallel cp = engine_detail::context_parallel_of(config, grid);
    const double part = kept_per_block(&cp);
    std::printf("[ measured ] %s over %d ranks: %.0f bytes a block keeps, whole sequence %.0f (%.3f)\n",
                method.c_str(), world, part, whole, part / whole);
    EXPECT_NEAR(part / whole, 1.0 / world, 0.1 / world) << method;
  }
}

TEST(ContextParallelAttention, EachMethodMatchesWholeSequenceAttention) {
  const int world = test::context().cpu_world->size();
  for (int cp = 2; cp <= world; cp *= 2)
    for (bool packed : {false, true}) {
      check_attention("ring", cp, 1, 2, packed);
      check_attention("ring", cp, 1, 1, packed);     // one key/value head: the ring needs no division
      check_attention("ring", cp, 1, 2, packed, 3);  // the masked blocks 3 query rows at a time
      check_attention("ulysses", cp, cp, 4, packed);
      if (cp == 4) check_attention("hybrid", 4, 2, 2, packed);
    }
}

TEST(ContextParallelEngine, EachMethod_MatchesSingleProcess_Fp32) {
  const int world = test::context().cpu_world->size();
  for (int kv : {2, 4}) {
    Layout base;
    base.kv_heads = kv;
    const TrainRun ref = reference(base);
    EXPECT_LT(ref.losses.back(), ref.losses.front()) << "the reference must learn";
    for (int cp = 2; cp <= world; cp *= 2) {
      std::vector<Layout> layouts;
      Layout ring = base;
      ring.cp = ring.dp = cp;
      if (kv == 2) layouts.push_back(ring);
      Layout ulysses = ring;
      ulysses.method = "ulysses";
      if (kv % cp == 0) layouts.push_back(ulysses);
      Layout hybrid = ring;
      hybrid.method = "hybrid";
      hybrid.ulysses = 2;
      if (cp == 4 && kv == 2) layouts.push_back(hybrid);
      for (const Layout& l : layouts) expect_same_training(l, train(l, groups_of(cp)), ref);
    }
  }
}

// GPT-2: learned positions read each token's place in the whole sequence.
TEST(ContextParallelEngine, Gpt2_MatchesSingleProcess_Fp32) {
  Layout base;
  base.preset = "tiny-gpt2";
  const TrainRun ref = reference(base);
  for (const std::string method : {"ring", "ulysses"}) {
    Layout l = base;
    l.cp = l.dp = 2;
    l.method = method;
    expect_same_training(l, train(l, groups_of(2)), ref);
  }
}

TEST(ContextParallelEngine, PackedDocuments_MatchSingleProcess) {
  const int world = test::context().cpu_world->size();
  Layout base;
  base.packed = true;
  const TrainRun ref = reference(base);
  Layout ring = base;
  ring.cp = ring.dp = 2;
  Layout ulysses = ring;
  ulysses.method = "ulysses";
  for (const Layout& l : {ring, ulysses}) expect_same_training(l, train(l, groups_of(2)), ref);
  if (world >= 4) {
    Layout hybrid = base;
    hybrid.cp = hybrid.dp = 4;
    hybrid.method = "hybrid";
    hybrid.ulysses = 2;
    expect_same_training(hybrid, train(hybrid, groups_of(4)), ref);
  }
}

TEST(ContextParallelEngine, WithDataParallelZeroStagesOffloadAndCheckpointing) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const TrainRun ref = reference(Layout{});
  for (int zero : {0, 1, 2, 3}) {
    Layout l;
    l.cp = 2;
    l.dp = 4;
    l.zero = zero;
    l.checkpointing = zero == 3;
    expect_same_training(l, train(l, groups_of(4)), ref);
  }
  Layout offload;
  offload.cp = 2;
  offload.dp = 4;
  offload.zero = 2;
  offload.offload = true;
  expect_same_training(offload, train(offload, groups_of(4)), ref);
}

TEST(ContextParallelEngine, UnderTensorParallelismAndInPipelineStages) {
  if (test::context().cpu_world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const TrainRun ref = reference(Layout{});
  Layout tp;
  tp.cp = tp.dp = 2;
  tp.tp = 2;
  tp.sequence_parallel = true;
  expect_same_training(tp, train(tp, groups_of(4)), ref);
  Layout pp;
  pp.cp = pp.dp = 2;
  pp.pp = 2;
  pp.method = "ulysses";
  expect_same_training(pp, train(pp, groups_of(4)), ref);
}

// A mixture of experts with each sequence over CP = 2 (and, on 4 ranks, 4)
// ranks by the ring, and on 4 ranks over CP 2 x TP 2 with sequence
// parallelism (each rank a quarter of every sequence): each rank routes its
// part, and the balancing terms (the auxiliary loss per micro-batch and per
// sequence, the z-loss, the aux-loss-free bias) are the whole micro-batch's
// from the counts gathered over the ranks splitting it. It trains as one
// process.
TEST(ContextParallelEngine, MixtureOfExperts_MatchesSingleProcess) {
  const int world = test::context().cpu_world->size();
  for (const std::string balancing : {"aux_loss", "seq_aux_loss"}) {
    Layout base;
    base.preset = "tiny-mixtral";
    base.balancing = balancing;
    const TrainRun ref = reference(base);
    for (int cp = 2; cp <= world; cp *= 2) {
      Layout l = base;
      l.cp = l.dp = cp;
      expect_same_training(l, train(l, groups_of(cp)), ref);
    }
    if (world < 4) continue;
    Layout both = base;
    both.cp = both.dp = 2;
    both.tp = 2;
    both.sequence_parallel = true;
    expect_same_training(both, train(both, groups_of(4)), ref);
  }
}

// A mixture of experts under context and expert parallelism together, both
// cut from the data-parallel ranks: the experts' groups the context-parallel
// ones (CP 2 x EP 2), inside them (CP 4 x EP 2), or across them (CP 2 x EP 4,
// each expert group exchanging the tokens of two sequences' halves). Tokens
// route to their experts' ranks whatever part of a sequence they are; the
// balancing terms are the whole micro-batch's over the context-parallel group.
// ZeRO 1, 2 and 3 (checkpointed) partition over the ranks holding the same experts.
TEST(ContextParallelEngine, MixtureOfExpertsWithExpertParallelism_MatchesSingleProcess) {
  const int world = test::context().cpu_world->size();
  Layout base;
  base.preset = "tiny-mixtral";
  base.balancing = "seq_aux_loss";
  const TrainRun ref = reference(base);
  std::vector<std::array<int, 6>> layouts{{2, 2, 2, 1, 1, 0}};  // cp, ep, dp, tp, pp, ZeRO
  if (world >= 4)
    layouts.insert(layouts.end(),
                   {{2, 2, 4, 1, 1, 1}, {4, 2, 4, 1, 1, 2}, {2, 4, 4, 1, 1, 3}, {2, 2, 2, 2, 1, 0}, {2, 2, 2, 1, 2, 0}});
  for (const auto& [cp, ep, dp, tp, pp, zero] : layouts) {
    Layout l = base;
    l.cp = cp;
    l.ep = ep;
    l.dp = dp;
    l.tp = tp;
    l.sequence_parallel = tp > 1;
    l.pp = pp;
    l.zero = zero;
    l.checkpointing = zero == 3;
    expect_same_training(l, train(l, groups_of(dp * tp * pp)), ref);
  }
}

TEST(ContextParallelEngine, BadShapesNamed) {
  Config config = Config::from_string(R"({"train_batch_size": 8, "context_parallel": {"size": 2, "method": "ulysses"}})",
                                      "cp.json");
  // Ulysses splits the heads: 4 query heads and 1 key/value head over 2 ranks.
  auto problems = engine_detail::context_parallel_problems(config, 4, 1, 32, 0.0);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("context_parallel.size: Ulysses over 2 ranks splits the heads, but the model has 4 query "
                             "and 1 key/value heads"),
            std::string::npos)
      << problems[0];
  // The ring's zigzag: 2 x 2 chunks; 30 tokens do not split.
  config.context_parallel.method = "ring";
  config.context_parallel.ulysses_size = 1;
  problems = engine_detail::context_parallel_problems(config, 4, 1, 30, 0.1);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("a sequence of 30 tokens does not split over 2 context-parallel ranks"), std::string::npos)
      << problems[0];
  EXPECT_NE(problems[0].find("multiple of 4"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("attention dropout"), std::string::npos) << problems[1];
  // The engine refuses a micro-batch that does not split, naming it.
  Layout l;
  l.cp = l.dp = 2;
  Config c = Config::from_string(config_json(l), describe(l));
  const distributed::ProcessGrid grid = distributed::ProcessGrid::create(c, sub_context(groups_of(2)));
  auto model = models::construct_model(model_config(l), nn::tp::TensorParallel{}, c10::kMeta);
  auto engine = initialize(c, model, grid);
  const at::Tensor t = test::counting_tokens(0, 2, 30);
  const std::string e = test::error_of([&] {
    engine.train_batch([&] { return MicroBatch{t.narrow(1, 0, 30), t.narrow(1, 1, 30)}; });
  });
  EXPECT_NE(e.find("train_batch: micro-batch 0: a sequence of 30 tokens does not split over 2 context-parallel ranks"),
            std::string::npos)
      << e;
  EXPECT_NE(test::error_of([&] { engine.forward(t.narrow(1, 0, 28), t.narrow(1, 1, 28)); }).find("train with them"),
            std::string::npos);
}
