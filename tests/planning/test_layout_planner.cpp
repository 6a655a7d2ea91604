// The layout planner against layouts computed by hand (its step-time model's
// formulas, the ZeRO paper's memory), the seed guide's worked example (GPT-3
// 175B on 64 A100s of 80 GB with ZeRO-3), the seed's ds_config.json fixing
// the plan, bad layouts named by their numbers, and stratum-estimate --plan.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "../common/run_command.h"
#include "stratum/core/error.h"
#include "stratum/models/model_config.h"
#include "stratum/planning/layout_planner.h"
#include "stratum/planning/plan_config.h"

using namespace stratum::planning;
using stratum::models::ModelConfig;
using stratum::models::parameter_count;
using stratum::models::preset;

namespace {

constexpr double kGiB = double(1ull << 30);

// Round figures, so the expected times below are easy to follow by hand.
Hardware round_hardware() {
  Hardware h;
  h.gpu = "test";
  h.gpu_memory = 80 * kGiB;
  h.peak_flops = 100e12;
  h.mfu = 0.5;  // 5e13 FLOP/s
  h.node_bandwidth = 10e9;
  h.network_bandwidth = 1e9;
  h.host_link_bandwidth = 25e9;
  h.host_updates_per_s = 1e10;
  return h;
}

// A model of 1e9 parameters (no shape) on one node of 4 GPUs.
PlanRequest parameters_only() {
  PlanRequest r;
  r.shape.params = 1'000'000'000;
  r.shape.gpus_per_node = 4;
  r.shape.seq_len = 1000;
  r.hardware = round_hardware();
  r.global_batch = 8;
  return r;
}

PlanRequest with_model(const ModelConfig& model, int64_t nodes, int64_t gpus, int64_t seq, int64_t batch) {
  PlanRequest r;
  r.model = model;
  r.shape.nodes = nodes;
  r.shape.gpus_per_node = gpus;
  r.shape.seq_len = seq;
  set_model_shape(r.shape, model);
  r.hardware = round_hardware();
  r.global_batch = batch;
  return r;
}

Layout data_parallel(int zero, int64_t dp, int64_t micro, int64_t m) {
  Layout l;
  l.dp = dp;
  l.zero_stage = zero;
  l.micro_batch = micro;
  l.micro_batches = m;
  return l;
}

// Whether the plan of `r` fits a layout that `wanted` accepts (the plan's top printed where not).
testing::AssertionResult plan_fits(const PlanRequest& r, const std::function<bool(const Layout&)>& wanted) {
  const Plan plan = plan_layouts(r);
  for (const auto& f : plan.fitting)
    if (wanted(f.layout)) return testing::AssertionSuccess();
  return testing::AssertionFailure() << format_plan(r, plan, 5);
}

std::string error_of(const PlanRequest& r, const Layout& l) {
  try {
    estimate_layout(r, l);
  } catch (const stratum::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

// 1e9 parameters, dp 4, micro-batch 1 x 2 micro-batches of 1000 tokens:
// forward 1000 x 6e9 / 3 / 5e13 = 0.04 s, backward 0.08 s, two of each: 0.24 s.
// Ring volumes of the 1e9-parameter gradient (fp32 on the wire) at 10 GB/s:
// a reduce-scatter 0.75 x 4e9 / 1e10 = 0.3 s, the 16-bit parameters'
// all-gather 0.15 s, an all-reduce 0.6 s; each hides behind a backward of 0.08 s.
TEST(LayoutPlanner, DataParallelStepTimeByHand) {
  const PlanRequest r = parameters_only();
  auto time = [&](int zero, bool offload = false, bool offload_param = false) {
    Layout l = data_parallel(zero, 4, 1, 2);
    l.offload_optimizer = offload;
    l.offload_param = offload_param;
    return estimate_layout(r, l).time;
  };
  const StepTime zero0 = time(0);
  EXPECT_NEAR(zero0.pipeline, 0.24, 1e-12);
  EXPECT_NEAR(zero0.compute, 0.24, 1e-12);
  EXPECT_NEAR(zero0.data_parallel, 0.6 - 0.08, 1e-12);  // all-reduced at the last micro-batch
  EXPECT_NEAR(zero0.total, 0.24 + 0.52, 1e-12);
  EXPECT_NEAR(time(1).data_parallel, (0.3 - 0.08) + 0.15, 1e-12);       // once, then the parameters
  EXPECT_NEAR(time(2).data_parallel, 2 * (0.3 - 0.08) + 0.15, 1e-12);   // every micro-batch
  EXPECT_NEAR(time(3).data_parallel, 2 * (0.15 + 0.15 + 0.3 - 0.12), 1e-12);  // two gathers and a scatter
  // Offload: a 2.5e8 shard, 4 + 2 bytes of it over 25 GB/s (0.06 s), and the
  // node's four shards through 1e10 updates/s (0.1 s).
  EXPECT_NEAR(time(2, true).offload, 0.06 + 0.1, 1e-12);
  // Parameters offloaded too: up in forward and backward, every micro-batch (2 x 2 x 5e8 B at 25 GB/s).
  EXPECT_NEAR(time(3, true, true).offload, 0.16 + 0.08, 1e-12);

  const LayoutEstimate e = estimate_layout(r, data_parallel(1, 4, 1, 2));
  EXPECT_DOUBLE_EQ(e.states, 6e9 + 12e9 / 4);  // (2 + 4) Psi + 12 Psi / N
  EXPECT_EQ(e.activations, 0.0);               // no shape
  EXPECT_NEAR(e.tokens_per_s, 8000 / (0.24 + 0.37), 1e-6);
  EXPECT_NEAR(e.mfu, 8000 * 6e9 / (0.24 + 0.37) / (4 * 100e12), 1e-12);
}

// GPT-2 124M at tp 2 on 2 GPUs: the compute is 6 FLOPs a parameter and token
// plus 12·L·h·s, halved; each block all-reduces b·s·h 16-bit values twice
// forward and twice backward (ring: 2 x 1/2 of the buffer at 10 GB/s), the
// embedding and the head once each.
TEST(LayoutPlanner, TensorParallelStepTimeByHand) {
  const ModelConfig g = preset("gpt2-124m");
  const double L = 12, h = 768, s = 1024, b = 2, m = 2;
  const double flops_per_token = 6.0 * static_cast<double>(parameter_count(g)) + 12 * L * h * s;
  const double compute = m * b * s * flops_per_token / 2 / 5e13;
  const double all_reduce = 2 * 0.5 * b * s * h * 2 / 10e9;
  PlanRequest r = with_model(g, 1, 2, 1024, 4);
  Layout l;
  l.tp = 2;
  l.micro_batch = 2;
  l.micro_batches = 2;
  StepTime t = estimate_layout(r, l).time;
  EXPECT_NEAR(t.compute, compute, 1e-9);
  EXPECT_NEAR(t.tensor_parallel, m * (4 * L + 2) * all_reduce, 1e-9);
  EXPECT_NEAR(t.total, t.compute + t.tensor_parallel, 1e-9);
  EXPECT_EQ(t.data_parallel, 0.0);  // dp 1
  // Sequence parallelism: 1.5x the blocks' backward volume (the regions' inputs gathered again).
  l.sequence_parallel = true;
  t = estimate_layout(r, l).time;
  EXPECT_NEAR(t.tensor_parallel, m * (5 * L + 2) * all_reduce, 1e-9);
  // Checkpointing: the blocks' forward again, with its two all-reduces.
  l.sequence_parallel = false;
  l.checkpointing = true;
  t = estimate_layout(r, l).time;
  const double block_flops = 6.0 * (12 * h * h + 13 * h) + 12 * h * s;
  EXPECT_NEAR(t.compute, compute + m * b * s * L * block_flops / 3 / 2 / 5e13, 1e-9);
  EXPECT_NEAR(t.tensor_parallel, m * (6 * L + 2) * all_reduce, 1e-9);
}

// Mixtral 8x7B over 8 GPUs with its experts over all 8 (ZeRO over the GPUs
// holding the same experts: each alone): a GPU holds the parameters outside
// the experts and 1/8 of the experts'; the compute counts a token's 2
// experts, not all 8; each of the 32 layers sends a token's 2 rows of 4096
// 16-bit values to the other GPUs' experts and back, forward and backward
// (7/8 of them off the GPU), at the node's 10 GB/s.
TEST(LayoutPlanner, ExpertParallelByHand) {
  const ModelConfig mixtral = preset("mixtral-8x7b");
  PlanRequest r = with_model(mixtral, 1, 8, 4096, 8);
  Layout l = data_parallel(1, 8, 1, 1);
  l.ep = 8;
  const LayoutEstimate e = estimate_layout(r, l);
  const double experts = 32.0 * 8 * 3 * 4096 * 14336, dense = static_cast<double>(parameter_count(mixtral)) - experts;
  const double held = dense + experts / 8;
  EXPECT_NEAR(e.states, (2 + 2) * held + 12 * held, 1e-3 * held);
  const double a2a = 4.0 * 32 * (4096 * 2) * 4096 * 2 * 7.0 / 8.0 / 10e9;
  EXPECT_NEAR(e.time.all_to_all, a2a, 1e-9);
  const double active = static_cast<double>(stratum::models::active_parameter_count(mixtral));
  EXPECT_NEAR(e.time.compute, 4096 * (6 * active + 12 * 32 * 4096 * 4096.0) / 5e13, 1e-6);
  EXPECT_NEAR(e.time.pipeline, e.time.compute + a2a, 1e-9);
  // Fewer expert-parallel GPUs: more experts a GPU.
  l.ep = 2;
  EXPECT_GT(estimate_layout(r, l).states, e.states);
  // What cannot run is named.
  l.ep = 3;
  EXPECT_NE(error_of(r, l).find("ep 3 does not divide dp 8"), std::string::npos);
  PlanRequest dense_model = with_model(preset("llama-8b"), 1, 8, 4096, 8);
  l.ep = 2;
  EXPECT_NE(error_of(dense_model, l).find("needs a mixture-of-experts model"), std::string::npos);
  // The plan searches it: every expert-parallel size that divides both.
  r.fixed.zero_stage = 1;
  EXPECT_TRUE(plan_fits(r, [](const Layout& f) { return f.ep == 8; }));
}

// Mixtral 8x7B over 8 GPUs as TP 2 x EP 4: a GPU holds its half of the
// attention and embeddings, the router whole, and 1/4 of the experts (which
// tensor parallelism replicates). Without sequence parallelism each GPU of a
// pair runs every token's experts and sends every token to the experts'
// GPUs; with it each routes its half of the tokens: the experts' compute and
// the all-to-all halve, and a block has only the attention's collectives.
TEST(LayoutPlanner, ExpertParallelWithTensorParallelismByHand) {
  const ModelConfig mixtral = preset("mixtral-8x7b");
  PlanRequest r = with_model(mixtral, 1, 8, 4096, 4);
  Layout l = data_parallel(0, 4, 1, 1);
  l.tp = 2;
  l.ep = 4;
  const LayoutEstimate plain = estimate_layout(r, l);
  const double experts = 32.0 * 8 * 3 * 4096 * 14336;
  const double held = static_cast<double>(stratum::models::tensor_parallel_param_count(mixtral, 2)) - experts +
                      experts / 4;
  EXPECT_NEAR(plain.states, (2 + 2 + 12) * held, 1e-3 * held);
  l.sequence_parallel = true;
  const LayoutEstimate split = estimate_layout(r, l);
  EXPECT_NEAR(split.states, plain.states, 1e-3 * held);
  const double expert_flops = 6.0 * 2 * 3 * 4096 * 14336;  // a token's 2 experts, trained
  EXPECT_NEAR(plain.time.compute - split.time.compute, 4096.0 * 32 * expert_flops / 2 / 5e13, 1e-6);
  EXPECT_NEAR(split.time.all_to_all, plain.time.all_to_all / 2, 1e-9);
  EXPECT_LT(split.activations, plain.activations);
  // One region a block (the attention's): its all-reduce forward, 1.5 of it in backward under SP.
  const double all_reduce = 2.0 * (2 - 1) / 2.0 * 4096.0 * 4096 * 2 / 10e9;
  EXPECT_NEAR(split.time.tensor_parallel, (32 * (1 + 1.5) + 2) * all_reduce, 1e-9);
  // The optimizer on the host: each of the node's 8 GPUs' fp32 master and moments of
  // what it holds, and the 16-bit copy the host Adam writes.
  l.zero_stage = 1;
  l.offload_optimizer = true;
  EXPECT_NEAR(estimate_layout(r, l).host_bytes_per_node, 8 * 14 * held, 1e-3 * 8 * 14 * held);
  l.zero_stage = 0;
  l.offload_optimizer = false;
  // The plan searches expert parallelism under tensor parallelism.
  r.fixed.tp = 2;
  EXPECT_TRUE(plan_fits(r, [](const Layout& f) { return f.ep > 1 && f.tp == 2; }));
}

// Mixtral 8x7B in 2 pipeline stages of 4 GPUs, its experts over 4 of them
// (PP 2 x EP 4): each stage's GPU holds its 16 blocks' attention and router,
// its share of the embedding or head, and a quarter of its blocks' experts;
// it exchanges tokens for its own 16 blocks only.
TEST(LayoutPlanner, ExpertParallelInPipelineStagesByHand) {
  const ModelConfig mixtral = preset("mixtral-8x7b");
  PlanRequest r = with_model(mixtral, 1, 8, 4096, 8);
  Layout l = data_parallel(0, 4, 1, 2);
  l.pp = 2;
  const LayoutEstimate whole = estimate_layout(r, l);
  l.ep = 4;
  const LayoutEstimate split = estimate_layout(r, l);
  const double block_experts = 8.0 * 3 * 4096 * 14336;
  // The busiest stage's 16 blocks keep a quarter of their experts. ZeRO-0's
  // bytes a parameter: 2 + 12, and the gradient 4 over 4 data-parallel GPUs
  // (fp32 on the wire), 2 where the GPU holding these experts is alone.
  const double stage_params = whole.states / 18;
  EXPECT_NEAR(split.states, 16 * (stage_params - 16 * block_experts * 3 / 4), 1e-6 * whole.states);
  // A stage exchanges for half the blocks, two micro-batches a step: as much as
  // 8 data-parallel GPUs exchange for all 32 blocks, one micro-batch each.
  Layout flat = data_parallel(0, 8, 1, 1);
  flat.ep = 4;
  EXPECT_NEAR(split.time.all_to_all, estimate_layout(r, flat).time.all_to_all, 1e-9);
  EXPECT_GT(split.time.all_to_all, 0.0);
  // The plan searches it.
  r.fixed.pp = 2;
  EXPECT_TRUE(plan_fits(r, [](const Layout& f) { return f.ep > 1; }));
}

// LLaMA 8B at 32768 tokens over 8 GPUs of one node, each sequence over all
// 8 (one data replica: the batch of 2 is 1 x 2 micro-batches): a GPU
// computes 1/8 of every token's work, keeps the activations of its 4096
// tokens, and holds ZeRO's states over all 8 GPUs; per block and micro-batch
// Ulysses' all-to-alls (forward and backward) at the node's 10 GB/s, not
// overlapped; the ring's forward hops hidden behind attention while it is
// the longer, its backward not.
TEST(LayoutPlanner, ContextParallelByHand) {
  const ModelConfig llama = preset("llama-8b");
  PlanRequest r = with_model(llama, 1, 8, 32768, 2);
  Layout l = data_parallel(1, 8, 1, 2);
  l.cp = 8;
  l.cp_ulysses = 8;
  const LayoutEstimate e = estimate_layout(r, l);
  const double s = 32768, L = 32, psi = static_cast<double>(parameter_count(llama));
  const double flops_per_token = 6 * psi + 12 * L * 4096 * s;
  EXPECT_NEAR(e.time.compute, 2 * (s / 8) * flops_per_token / 5e13, 1e-6);
  const double row = (s / 8) * 128;  // a head's elements on a GPU
  const double ulysses = 2 * (7.0 / 8) * row * (32 + 16 + 32) * 2;  // q, k, v and the output; forward and backward
  EXPECT_NEAR(e.time.context_parallel, 2 * L * ulysses / 10e9, 1e-9);
  EXPECT_NEAR(e.time.pipeline, e.time.compute + e.time.context_parallel, 1e-9);
  EstimateInput in = r.shape;
  in.context_parallel = 8, in.context_ulysses = 8, in.micro_batch = 1;
  EXPECT_DOUBLE_EQ(e.activations, estimate_activation_bytes(in));
  EXPECT_DOUBLE_EQ(e.buffers, context_parallel_buffer_bytes(in));
  // ZeRO-1 over all 8 GPUs: (2 + 4) Psi + 12 Psi / 8, as at cp 1.
  EXPECT_NEAR(e.states, 6 * psi + 12 * psi / 8, 1e-6 * psi);
  EXPECT_NEAR(e.tokens_per_s, 2 * s / e.time.total, 1e-6);

  // The ring: 7 hops of k and v forward, each 4096 x 2 x 8 x 128 16-bit
  // values (1.68 ms at 10 GB/s), hidden behind an eighth of the block's
  // forward attention (4096 tokens x 12 x 4096 x 32768 / 3 / 5e13 / 8 = 5.5 ms);
  // backward 7 hops again and 8 of their fp32 gradients.
  l.cp_ulysses = 1;
  const LayoutEstimate ring = estimate_layout(r, l);
  const double kv = row * 16;
  EXPECT_NEAR(ring.time.context_parallel, 2 * L * (7 * kv * 2 + 8 * kv * 4) / 10e9, 1e-9);
  // A slow link shows the forward's hops beyond the attention they overlap.
  PlanRequest slow = r;
  slow.hardware.node_bandwidth = 0.1e9;
  const double hop = kv * 2 / 0.1e9, attention = (s / 8) * 12 * 4096 * s / 3 / 5e13;
  EXPECT_NEAR(estimate_layout(slow, l).time.context_parallel,
              2 * L * (7 * (hop - attention / 8) + (7 * kv * 2 + 8 * kv * 4) / 0.1e9), 1e-6);
  // Checkpointing: the recomputed forward exchanges again (Ulysses: 3 of its 2-way volumes).
  l.cp_ulysses = 8;
  l.checkpointing = true;
  EXPECT_NEAR(estimate_layout(r, l).time.context_parallel, 1.5 * e.time.context_parallel, 1e-9);
  // Across nodes (2 nodes of 4 GPUs): the group spans the network's 1 GB/s.
  PlanRequest two_nodes = with_model(llama, 2, 4, 32768, 2);
  l.checkpointing = false;
  EXPECT_NEAR(estimate_layout(two_nodes, l).time.context_parallel, 10 * e.time.context_parallel, 1e-9);
  // Two data replicas of cp 4: the batch counts replicas, activations twice cp 8's.
  l.cp = 4, l.cp_ulysses = 1, l.micro_batches = 1;
  const LayoutEstimate four = estimate_layout(r, l);
  EXPECT_DOUBLE_EQ(four.activations, 2 * e.activations);
}

// What cannot run is named with its numbers.
TEST(LayoutPlanner, BadContextParallelLayoutsNameTheirNumbers) {
  PlanRequest r = with_model(preset("llama-8b"), 1, 8, 8192, 4);
  Layout l = data_parallel(1, 8, 1, 1);
  l.cp = 3;
  EXPECT_NE(error_of(r, l).find("cp 3 does not divide dp 8"), std::string::npos) << error_of(r, l);
  l.cp = 4;
  l.micro_batches = 3;
  EXPECT_NE(error_of(r, l).find("micro-batch 1 x 3 micro-batches x 2 data replicas (dp 8 / cp 4) is not the global "
                                "batch of 4"),
            std::string::npos)
      << error_of(r, l);
  l.micro_batches = 2;
  EXPECT_EQ(error_of(r, l), "no error");
  l.cp = 2, l.micro_batches = 1;
  PlanRequest odd = with_model(preset("llama-8b"), 1, 8, 8194, 4);
  EXPECT_NE(error_of(odd, l).find("cp 2 (ring): a sequence of 8194 tokens"), std::string::npos) << error_of(odd, l);
  // Ulysses over 8 of tensor parallelism 2's 4 key/value heads a GPU.
  PlanRequest tp2 = with_model(preset("llama-8b"), 1, 16, 8192, 1);
  Layout u = data_parallel(1, 8, 1, 1);
  u.tp = 2, u.cp = 8, u.cp_ulysses = 8;
  EXPECT_NE(error_of(tp2, u).find("cp 8 (ulysses): Ulysses over 8 GPUs splits the heads"), std::string::npos)
      << error_of(tp2, u);
  u.cp_ulysses = 4;  // hybrid: 4 of them
  EXPECT_EQ(error_of(tp2, u), "no error");
  PlanRequest p = parameters_only();
  Layout two = data_parallel(0, 4, 1, 4);
  two.cp = 2;
  EXPECT_NE(error_of(p, two).find("cp 2 (ring) needs the model's shape"), std::string::npos) << error_of(p, two);
  // A mixture of experts under context parallelism plans, with expert parallelism too.
  PlanRequest moe = with_model(preset("mixtral-8x7b"), 1, 8, 4096, 4);
  EXPECT_EQ(error_of(moe, l), "no error");
  l.ep = 2;
  EXPECT_EQ(error_of(moe, l), "no error");
}

// LLaMA 8B at 131072 tokens on 8 H200s, a batch of 8 sequences: without
// context parallelism no layout of data parallelism alone fits (a GPU would
// keep a whole sequence's activations, over 100 GiB with checkpointing, and
// offloading is ruled out here); split over the GPUs it fits, and the whole
// plan ranks such a layout first. At 1024 tokens none is searched.
TEST(LayoutPlanner, LongSequencesRankContextParallelLayouts) {
  PlanRequest r = with_model(preset("llama-8b"), 1, 8, 131072, 8);
  r.hardware = hardware_preset("h200");
  r.fixed.tp = 1, r.fixed.pp = 1;
  r.fixed.offload_optimizer = false;
  PlanRequest whole = r;
  whole.fixed.cp = 1;
  const Plan none = plan_layouts(whole);
  EXPECT_TRUE(none.fitting.empty()) << format_plan(whole, none, 3);
  const Plan split = plan_layouts(r);
  ASSERT_FALSE(split.fitting.empty());
  for (const LayoutEstimate& e : split.fitting) EXPECT_GT(e.layout.cp, 1) << describe(e.layout);
  PlanRequest free = with_model(preset("llama-8b"), 1, 8, 131072, 8);
  free.hardware = hardware_preset("h200");
  const Plan all = plan_layouts(free);
  ASSERT_FALSE(all.fitting.empty());
  EXPECT_GT(all.fitting.front().layout.cp, 1) << format_plan(free, all, 5);
  bool methods[3] = {false, false, false};
  for (const LayoutEstimate& e : all.fitting)
    if (e.layout.cp > 1) methods[static_cast<int>(context_method_of(e.layout.cp, e.layout.cp_ulysses))] = true;
  EXPECT_TRUE(methods[0] && methods[1] && methods[2]) << "ring, Ulysses and hybrid each ranked";
  const std::string text = format_plan(free, all, 3);
  EXPECT_NE(text.find("context parallelism (cp: each sequence over cp of the dp GPUs"), std::string::npos) << text;
  EXPECT_NE(text.find("  8 uly  "), std::string::npos) << text;
  // Short sequences: context parallelism is not searched unless asked for.
  PlanRequest shorter = with_model(preset("llama-8b"), 1, 8, 1024, 64);
  shorter.hardware = hardware_preset("h200");
  const Plan short_plan = plan_layouts(shorter);
  for (const LayoutEstimate& e : short_plan.fitting) ASSERT_EQ(e.layout.cp, 1) << describe(e.layout);
  EXPECT_NE(format_plan(shorter, short_plan, 1).find("context parallelism not searched (seq 1024 < 16384"),
            std::string::npos);
  shorter.fixed.cp = 2;
  const Plan asked = plan_layouts(shorter);
  ASSERT_FALSE(asked.fitting.empty());
  for (const LayoutEstimate& e : asked.fitting) EXPECT_EQ(e.layout.cp, 2) << describe(e.layout);
  // Not sizes leaving a GPU fewer than 4096 tokens when only the length asks: 16384 over 8 is 2048.
  PlanRequest medium = with_model(preset("llama-8b"), 1, 8, 16384, 8);
  medium.fixed.tp = 1, medium.fixed.pp = 1, medium.fixed.zero_stage = 3;
  int64_t largest = 1;
  for (const LayoutEstimate& e : plan_layouts(medium).fitting) largest = std::max(largest, e.layout.cp);
  EXPECT_EQ(largest, 4);
}

// A pipeline's time is its simulated makespan: the busiest stage's compute,
// collectives and receives plus its bubble, which shrinks with the schedules
// built to shrink it; its memory is the busiest stage's.
TEST(LayoutPlanner, PipelineTimeIsTheSimulatedSchedule) {
  PlanRequest r = with_model(preset("gpt2-350m"), 1, 4, 1024, 16);
  auto with = [&](stratum::pipeline::ScheduleKind kind, int64_t v) {
    Layout l;
    l.pp = 4;
    l.micro_batch = 2;
    l.micro_batches = 8;
    l.schedule = kind;
    l.virtual_stages = v;
    l.zero_stage = 1;
    return estimate_layout(r, l);
  };
  using K = stratum::pipeline::ScheduleKind;
  const LayoutEstimate gpipe = with(K::gpipe, 1), one = with(K::one_f_one_b, 1), zb = with(K::zb_h1, 1),
                       inter = with(K::interleaved, 2);
  for (const LayoutEstimate* e : {&gpipe, &one, &zb, &inter}) {
    SCOPED_TRACE(describe(e->layout));
    EXPECT_NEAR(e->time.pipeline, e->time.compute + e->time.transfers + e->time.bubble, 1e-9 * e->time.pipeline);
    EXPECT_GT(e->time.transfers, 0.0);
    EXPECT_GT(e->time.bubble, 0.0);
  }
  EXPECT_NEAR(one.time.pipeline, gpipe.time.pipeline, 1e-9 * one.time.pipeline);  // same bubble, (p - 1)/m
  // 1F1B's bubble is (p-1)/m of a stage's work when the stages weigh the
  // same; the busiest stage (the head's) waits less, for the lighter ones.
  EXPECT_LE(one.time.bubble, 3.0 / 8 * one.time.compute);
  EXPECT_GT(one.time.bubble, 0.1 * one.time.compute);
  EXPECT_LT(zb.time.bubble, 0.5 * one.time.bubble);
  EXPECT_LT(inter.time.bubble, one.time.bubble);
  // GPipe keeps all 8 micro-batches' activations, 1F1B at most 4 (stage 0) and 1 (stage 3).
  EXPECT_GT(gpipe.activations, 1.5 * one.activations);
  // The busiest memory is the head's stage: its blocks' states and the tied embedding's copy.
  EXPECT_EQ(one.busiest_stage, 3);
}

// A stage's input arrives over the network when the stages sit on different
// nodes (2 nodes of 4 GPUs: pp 2 x tp 4 puts one stage on each), and over the
// node's link otherwise (one node of 8 GPUs): 10 GB/s against 1 GB/s here.
TEST(LayoutPlanner, StageTransfersCrossNodesAtTheNetworksBandwidth) {
  Layout l;
  l.pp = 2;
  l.tp = 4;
  l.micro_batch = 1;
  l.micro_batches = 4;
  l.zero_stage = 1;
  const LayoutEstimate two_nodes = estimate_layout(with_model(preset("gpt2-350m"), 2, 4, 1024, 4), l);
  const LayoutEstimate one_node = estimate_layout(with_model(preset("gpt2-350m"), 1, 8, 1024, 4), l);
  // Per micro-batch each stage receives one b·s·h 16-bit tensor: the activation (stage 1) or its gradient (stage 0).
  EXPECT_NEAR(one_node.time.transfers, 4 * 1024.0 * 1024 * 2 / 10e9, 1e-12);
  EXPECT_NEAR(two_nodes.time.transfers, 10 * one_node.time.transfers, 1e-12);
}

// The seed guide's worked example: GPT-3 175B on 64 A100s of 80 GB fits with
// ZeRO-3 (16 Psi / 64 of model states, one block gathered and the next
// prefetched, checkpointed activations), where data parallelism at ZeRO 0-2
// fits on no number of GPUs (its states never fall below 2 Psi, 325 GiB).
TEST(LayoutPlanner, SeedExampleGpt3On64A100s) {
  const ModelConfig gpt3 = preset("gpt3-175b");
  PlanRequest r = with_model(gpt3, 8, 8, 2048, 512);
  r.hardware = hardware_preset("a100-80gb");
  Layout zero3 = data_parallel(3, 64, 1, 8);
  zero3.checkpointing = true;
  const LayoutEstimate e = estimate_layout(r, zero3);
  const double psi = static_cast<double>(parameter_count(gpt3)), h = 12288, s = 2048;
  // The largest layer as the estimator weighs it: a block, with the position table and the final norm.
  const double block = 12 * h * h + 13 * h + s * h + 2 * h;
  const double by_hand = 16 * psi / 64 + 3 * 2 * block  // states and the working set
                         + 96 * 2 * s * h + 2 * s * 16 * h  // the blocks' inputs, one recomputed block
                         + 2 * s * 9 * h                    // and what its backward holds beside it
                         + s * 50257 * 4;                   // the logits and their gradient, 16-bit
  EXPECT_NEAR(e.gpu_bytes, by_hand, 1e-9 * by_hand);
  EXPECT_LT(e.gpu_bytes, 60 * kGiB);
  EXPECT_TRUE(e.fits);

  const std::vector<FewestGpus> fewest = fewest_gpus_data_parallel(r, 1024);
  for (const FewestGpus& f : fewest) {
    SCOPED_TRACE("ZeRO-" + std::to_string(f.zero_stage) + (f.offload_optimizer ? " offload" : ""));
    if (f.zero_stage <= 2) {
      EXPECT_EQ(f.gpus, 0);
      EXPECT_GT(f.floor_bytes, 2 * psi);
    }
    if (f.zero_stage == 3 && !f.offload_optimizer) {
      EXPECT_GT(f.gpus, 0);
      EXPECT_LE(f.gpus, 64);
    }
  }
  // The planner finds it, and layouts with model parallelism that are faster.
  r.global_batch = 128;
  const Plan plan = plan_layouts(r);
  ASSERT_FALSE(plan.fitting.empty());
  bool zero3_fits = false, plain_fits = false;
  for (const LayoutEstimate& f : plan.fitting) {
    const Layout& l = f.layout;
    if (l.pp == 1 && l.tp == 1 && l.zero_stage == 3 && !l.offload_optimizer) zero3_fits = true;
    if (l.pp == 1 && l.tp == 1 && l.zero_stage < 3) plain_fits = true;
  }
  EXPECT_TRUE(zero3_fits);
  EXPECT_FALSE(plain_fits);
  EXPECT_TRUE(plan.fitting.front().layout.pp > 1 || plan.fitting.front().layout.tp > 1)
      << describe(plan.fitting.front().layout);
  for (size_t i = 1; i < plan.fitting.size(); ++i)
    ASSERT_LE(plan.fitting[i - 1].time.total, plan.fitting[i].time.total);
}

// The planner's memory is the estimator's: the busiest stage's model states
// for the layout's ZeRO stage, its activations, plus the stage transfers'
// and sequence parallelism's buffers.
TEST(LayoutPlanner, MemoryIsTheEstimatorsAtTheBusiestStage) {
  const ModelConfig llama = preset("llama-8b");
  PlanRequest r = with_model(llama, 1, 8, 4096, 16);
  Layout l;
  l.dp = 2, l.pp = 2, l.tp = 2, l.sequence_parallel = true;
  l.zero_stage = 1, l.micro_batch = 1, l.micro_batches = 8;
  const LayoutEstimate e = estimate_layout(r, l);
  EstimateInput in = r.shape;
  in.pipeline_stages = 2, in.tensor_parallel = 2, in.sequence_parallel = true;
  in.micro_batch = 1, in.micro_batches = 8;
  set_model_shape(in, llama);
  const std::vector<StageEstimate> stages = estimate_pipeline_stages(in);
  const StageEstimate& busiest = stages[static_cast<size_t>(e.busiest_stage)];
  double states = 0;
  for (const auto& x : busiest.states)
    if (x.stage == 1 && !x.offload_optimizer) states = x.gpu_bytes;
  EXPECT_DOUBLE_EQ(e.states, states);
  EXPECT_DOUBLE_EQ(e.activations, busiest.activation_bytes);
  const double unit = 4096.0 * 4096 * 2;  // b·s·h, 16-bit
  EXPECT_DOUBLE_EQ(e.buffers, 2 * unit / 2 + unit);
  for (const StageEstimate& st : stages) {
    double other = 0;
    for (const auto& x : st.states)
      if (x.stage == 1 && !x.offload_optimizer) other = x.gpu_bytes;
    EXPECT_LE(other + st.activation_bytes, e.states + e.activations);
  }
}

TEST(LayoutPlanner, BadLayoutsNameTheirNumbers) {
  PlanRequest r = with_model(preset("gpt2-124m"), 2, 4, 1024, 16);
  Layout l = data_parallel(1, 4, 1, 4);
  EXPECT_NE(error_of(r, l).find("dp 4 x pp 1 x tp 1 = 4 is not the cluster's 8 GPUs (2 node(s) x 4)"),
            std::string::npos)
      << error_of(r, l);
  l.dp = 1, l.tp = 8, l.micro_batches = 16;
  EXPECT_NE(error_of(r, l).find("tp 8 does not divide the 4 GPUs of a node"), std::string::npos) << error_of(r, l);
  l = data_parallel(1, 8, 1, 3);
  EXPECT_NE(error_of(r, l).find("micro-batch 1 x 3 micro-batches x dp 8 is not the global batch of 16"),
            std::string::npos)
      << error_of(r, l);
  l = data_parallel(2, 4, 1, 4);
  l.tp = 2;
  r.model->heads = 3;  // 3 heads do not split over 2 ranks
  EXPECT_NE(error_of(r, l).find("3"), std::string::npos) << error_of(r, l);
  EXPECT_EQ(error_of(r, l).find("cluster"), std::string::npos) << error_of(r, l);
  PlanRequest p = parameters_only();
  Layout two = data_parallel(0, 2, 1, 4);
  two.tp = 2;
  EXPECT_NE(error_of(p, two).find("needs the model's shape"), std::string::npos) << error_of(p, two);
  p.global_batch = 0;
  EXPECT_THROW(plan_layouts(p), stratum::Error);
}

// The seed's ds_config.json fixes fp16, ZeRO-2 with the optimizer offloaded,
// 4 pipeline stages, a batch of 64 in 2 micro-batches: every layout listed has
// them, and only dp and tp are searched.
TEST(LayoutPlanner, SeedConfigFixesWhatItSays) {
  const std::string path = ::testing::TempDir() + "/seed_ds_config.json";
  std::ofstream(path) << R"({"train_batch_size": 64, "gradient_accumulation_steps": 2, "fp16": {"enabled": true},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "pipeline": {"stages": 4, "partition_method": "parameters"}})";
  PlanRequest r = with_model(preset("gpt2-1.3b"), 1, 8, 2048, 0);
  r.shape.param_bytes = 4;
  apply_plan_config(r, path);
  EXPECT_EQ(r.shape.param_bytes, 2);
  EXPECT_EQ(r.global_batch, 64);
  const Plan plan = plan_layouts(r);
  ASSERT_FALSE(plan.fitting.empty());
  for (const LayoutEstimate& e : plan.fitting) {
    EXPECT_EQ(e.layout.pp, 4);
    EXPECT_EQ(e.layout.zero_stage, 2);
    EXPECT_TRUE(e.layout.offload_optimizer);
    EXPECT_EQ(e.layout.micro_batches, 2);
    EXPECT_EQ(e.layout.micro_batch * 2 * e.layout.dp, 64);
  }

  // A config without fp16 or bf16 trains in fp32; one that contradicts a flag, or asks for what is not modelled, is refused.
  std::ofstream(path) << R"({"train_batch_size": 32, "pipeline": {"stages": 2}, "data_types": {"grad_accum_dtype": "fp32"}})";
  PlanRequest fp32 = with_model(preset("gpt2-1.3b"), 1, 8, 2048, 0);
  apply_plan_config(fp32, path);
  EXPECT_EQ(fp32.shape.param_bytes, 4);
  EXPECT_EQ(fp32.shape.grad_bytes, 4);
  PlanRequest flagged = with_model(preset("gpt2-1.3b"), 1, 8, 2048, 0);
  flagged.fixed.pp = 4;
  try {
    apply_plan_config(flagged, path);
    ADD_FAILURE() << "a contradiction was accepted";
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.stages is 2 but the command line fixes another value"),
              std::string::npos)
        << e.what();
  }
  PlanRequest batch = with_model(preset("gpt2-1.3b"), 1, 8, 2048, 16);
  EXPECT_THROW(apply_plan_config(batch, path), stratum::Error);  // train_batch_size 32 against 16
  // fp8.enabled: the plan counts the projections' FP8 weight copies.
  std::ofstream(path) << R"({"train_batch_size": 16, "bf16": {"enabled": true}, "fp8": {"enabled": true}})";
  PlanRequest fp8 = with_model(preset("gpt2-1.3b"), 1, 8, 2048, 0);
  apply_plan_config(fp8, path);
  EXPECT_TRUE(fp8.shape.fp8);
  EXPECT_DOUBLE_EQ(fp8.shape.fp8_share, 1.0);
  // What fp8.exclude keeps in bf16 is not counted: gpt2-1.3b's attention
  // output projections (c_proj, 2048 x 2048) are a twelfth of its projections.
  std::ofstream(path) << R"({"train_batch_size": 16, "bf16": {"enabled": true},
    "fp8": {"enabled": true, "exclude": ["attn.c_proj"]}})";
  PlanRequest excluded = with_model(preset("gpt2-1.3b"), 1, 8, 2048, 0);
  apply_plan_config(excluded, path);
  EXPECT_DOUBLE_EQ(excluded.shape.fp8_share, 11.0 / 12.0);
  // A pattern naming no projection is refused as the engine refuses it; fp8 needs the model's shape.
  std::ofstream(path) << R"({"train_batch_size": 16, "bf16": {"enabled": true},
    "fp8": {"enabled": true, "exclude": ["attn.qkv_typo"]}})";
  PlanRequest typo = with_model(preset("gpt2-1.3b"), 1, 8, 2048, 0);
  try {
    apply_plan_config(typo, path);
    ADD_FAILURE() << "an exclude pattern naming nothing was accepted";
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn.qkv_typo"), std::string::npos) << e.what();
  }
  PlanRequest shapeless = parameters_only();  // global batch 8
  std::ofstream(path) << R"({"train_batch_size": 8, "bf16": {"enabled": true}, "fp8": {"enabled": true}})";
  try {
    apply_plan_config(shapeless, path);
    ADD_FAILURE() << "fp8 without the model's shape was accepted";
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("give --model"), std::string::npos) << e.what();
  }
  std::ofstream(path) << R"({"train_batch_size": 32, "topology": {"order": "dp-tp-pp"}})";
  try {
    apply_plan_config(fp32, path);
    ADD_FAILURE() << "topology.order was accepted";
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("topology.order"), std::string::npos) << e.what();
  }
}

// A config's context_parallel section fixes what it states: the size, the
// method and (with it) the Ulysses size; the batch counts its data replicas.
TEST(LayoutPlanner, ConfigFixesContextParallelism) {
  const std::string path = ::testing::TempDir() + "/cp_ds_config.json";
  std::ofstream(path) << R"({"train_batch_size": 2, "bf16": {"enabled": true},
    "context_parallel": {"size": 4, "method": "ulysses"}})";
  PlanRequest r = with_model(preset("llama-8b"), 1, 8, 32768, 0);
  r.hardware = hardware_preset("h200");
  apply_plan_config(r, path);
  EXPECT_EQ(r.fixed.cp, 4);
  EXPECT_EQ(r.fixed.cp_ulysses, 4);
  const Plan plan = plan_layouts(r);
  ASSERT_FALSE(plan.fitting.empty());
  for (const LayoutEstimate& e : plan.fitting) {
    EXPECT_EQ(e.layout.cp, 4);
    EXPECT_EQ(e.layout.cp_ulysses, 4);
    EXPECT_EQ(e.layout.micro_batch * e.layout.micro_batches * e.layout.dp / 4, 2) << describe(e.layout);
  }
  PlanRequest flagged = with_model(preset("llama-8b"), 1, 8, 32768, 0);
  flagged.fixed.cp = 2;
  try {
    apply_plan_config(flagged, path);
    ADD_FAILURE() << "a contradiction was accepted";
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("context_parallel.size is 4 but the command line fixes another value"),
              std::string::npos)
        << e.what();
  }
  PlanRequest method = with_model(preset("llama-8b"), 1, 8, 32768, 0);
  method.fixed.cp_method = ContextMethod::ring;
  EXPECT_THROW(apply_plan_config(method, path), stratum::Error);
  std::ofstream(path) << R"({"train_batch_size": 2, "context_parallel": {"size": 8, "method": "hybrid", "ulysses_size": 2}})";
  PlanRequest hybrid = with_model(preset("llama-8b"), 1, 8, 32768, 0);
  apply_plan_config(hybrid, path);
  EXPECT_EQ(hybrid.fixed.cp, 8);
  EXPECT_EQ(hybrid.fixed.cp_method, ContextMethod::hybrid);
  EXPECT_EQ(hybrid.fixed.cp_ulysses, 2);
}

TEST(LayoutPlanner, ByteSizes) {
  EXPECT_DOUBLE_EQ(parse_byte_size("80GiB", "--gpu-memory"), 80 * kGiB);
  EXPECT_DOUBLE_EQ(parse_byte_size("80 GB", "--gpu-memory"), 80e9);
  EXPECT_DOUBLE_EQ(parse_byte_size("1.5TiB", "--host-memory"), 1.5 * 1024 * kGiB);
  EXPECT_DOUBLE_EQ(parse_byte_size("141e9", "--gpu-memory"), 141e9);
  for (const char* bad : {"", "GiB", "80 parsecs", "-1GB", "0"})
    EXPECT_THROW(parse_byte_size(bad, "--gpu-memory"), stratum::Error) << bad;
}

namespace {
std::string run_estimate(const std::string& flags, int& status) {
  const auto r = stratum::test::run_command(std::string(STRATUM_BIN_DIR) + "/stratum-estimate " + flags);
  status = r.status;
  return r.output;
}
}  // namespace

TEST(LayoutPlanner, ProgramListsTheLayoutsThatFit) {
  int status = -1;
  std::string out = run_estimate(
      "--plan --model gpt3-175b --nodes 8 --gpus-per-node 8 --gpu a100-80gb --gpu-memory 80GiB --seq 2048 "
      "--global-batch 128 --rows 3 --host-memory 1TiB",
      status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("Layouts for gpt3-175b (174.6B parameters) on 8 node(s) x 8 GPU(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("fit; the 3 fastest"), std::string::npos) << out;
  EXPECT_NE(out.find("the fewest GPUs that fit"), std::string::npos) << out;
  // A flag of the planner without --plan is refused rather than ignored.
  out = run_estimate("--model gpt2-124m --global-batch 8", status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--global-batch needs --plan"), std::string::npos) << out;
  // Nothing fits: the closest layout and the reason, exit status 1.
  out = run_estimate("--plan --model llama-70b --nodes 1 --gpus-per-node 1 --gpu-memory 8GiB --seq 4096 --global-batch 8",
                     status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("none fits; the least memory: dp 1 x pp 1 x tp 1"), std::string::npos) << out;
  // Context parallelism fixed from the command line, listed with its method.
  out = run_estimate("--plan --model llama-8b --nodes 1 --gpus-per-node 8 --gpu h200 --seq 131072 --global-batch 8 "
                     "--cp 8 --cp-method ring --rows 2",
                     status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("searched as fixed"), std::string::npos) << out;
  EXPECT_NE(out.find("  8 ring  "), std::string::npos) << out;
  EXPECT_EQ(out.find(" uly "), std::string::npos) << out;
  out = run_estimate("--plan --model llama-8b --nodes 1 --gpus-per-node 8 --seq 131072 --global-batch 8 --cp 3", status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("no layout of 8 GPUs has what is fixed (cp 3 "), std::string::npos) << out;
  out = run_estimate("--plan --model gpt2-124m --nodes 1 --gpus-per-node 2 --global-batch 8 --gpu-memory 80parsecs",
                     status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--gpu-memory '80parsecs' is not a positive size"), std::string::npos) << out;
}
