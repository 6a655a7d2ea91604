// The estimator against the ZeRO paper's per-GPU model-state formulas, and the
// stratum-estimate program.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>

#include "stratum/monitor/memory_estimator.h"

using namespace stratum::monitor;

namespace {
const StateEstimate& find(const std::vector<StateEstimate>& v, int stage, bool opt, bool param) {
  for (const auto& e : v)
    if (e.stage == stage && e.offload_optimizer == opt && e.offload_param == param) return e;
  throw std::runtime_error("no such row");
}
}  // namespace

TEST(MemoryEstimator, ModelStatesFollowTheZeroFormulas) {
  EstimateInput in;
  in.params = 7'500'000'000;
  in.nodes = 8;
  in.gpus_per_node = 8;  // N = 64
  const double psi = 7.5e9, n = 64;
  auto e = estimate_model_states(in);
  EXPECT_DOUBLE_EQ(find(e, 0, false, false).gpu_bytes, 16 * psi);
  EXPECT_DOUBLE_EQ(find(e, 1, false, false).gpu_bytes, 4 * psi + 12 * psi / n);
  EXPECT_DOUBLE_EQ(find(e, 2, false, false).gpu_bytes, 2 * psi + 14 * psi / n);
  EXPECT_DOUBLE_EQ(find(e, 3, false, false).gpu_bytes, 16 * psi / n);  // no working set given
  // Offload: the fp32 master, m, v and the fp32 gradient shard go to the host.
  EXPECT_DOUBLE_EQ(find(e, 2, true, false).gpu_bytes, 2 * psi + 2 * psi / n);
  EXPECT_DOUBLE_EQ(find(e, 2, true, false).cpu_bytes_per_node, 16 * psi / n * 8);
  EXPECT_DOUBLE_EQ(find(e, 3, true, true).gpu_bytes, 0.0);
  EXPECT_DOUBLE_EQ(find(e, 3, true, true).cpu_bytes_per_node, 18 * psi / n * 8);
  // The ZeRO paper's headline: 7.5B on 64 GPUs at stage 3 is 1.9 GB a GPU.
  EXPECT_NEAR(find(e, 3, false, false).gpu_bytes / 1e9, 1.875, 1e-9);
}

TEST(MemoryEstimator, Fp32TrainingAndTheZero3WorkingSet) {
  EstimateInput in;
  in.params = 1'000'000;
  in.gpus_per_node = 4;
  in.param_bytes = 4;
  in.largest_layer_params = 1000;
  auto e = estimate_model_states(in);
  EXPECT_DOUBLE_EQ(find(e, 0, false, false).gpu_bytes, 16e6);  // the master is the parameters
  EXPECT_DOUBLE_EQ(find(e, 1, false, false).gpu_bytes, 8e6 + 12e6 / 4);
  EXPECT_DOUBLE_EQ(find(e, 2, false, false).gpu_bytes, 4e6 + 16e6 / 4);
  EXPECT_DOUBLE_EQ(find(e, 3, false, false).gpu_bytes, 20e6 / 4 + 3 * 4 * 1000);
}

TEST(MemoryEstimator, ActivationsShrinkWithCheckpointingAndGrowWithTheBatch) {
  EstimateInput in;
  in.params = 124'439'808;
  in.layers = 12;
  in.hidden = 768;
  in.heads = 12;
  in.vocab = 50257;
  in.micro_batch = 8;
  in.seq_len = 1024;
  const double full = estimate_activation_bytes(in);
  // 12 layers x 32 sbh bytes + logits (bf16 logits, gradient and the LM head's padded gradient copy).
  EXPECT_DOUBLE_EQ(full, 12 * 32.0 * 1024 * 8 * 768 + 1024 * 8 * 50257 * 6.0);
  in.activation_checkpointing = true;
  EXPECT_LT(estimate_activation_bytes(in), full);
  in.activation_checkpointing = false;
  in.micro_batch = 16;
  EXPECT_DOUBLE_EQ(estimate_activation_bytes(in), 2 * full);
  in.layers = 0;
  EXPECT_EQ(estimate_activation_bytes(in), 0.0);
}

// Measured on 2 x H200 (stratum-train, bf16, ZeRO-2, seq 1024, micro 16; peak
// allocated bytes, docs/benchmarks.md) before the fused cross-entropy, when the
// loss kept 12 bytes a logit: with that loss the estimate is within 2% of each.
TEST(MemoryEstimator, MatchesPeaksMeasuredOnH200) {
  struct Case { int64_t params, layers, hidden, gpus; double measured_gib; };
  for (const Case& c : {Case{124439808, 12, 768, 1, 15.68}, Case{124439808, 12, 768, 2, 14.87},
                        Case{354823168, 24, 1024, 1, 26.65}, Case{354823168, 24, 1024, 2, 24.33}}) {
    EstimateInput in;
    in.params = c.params;
    in.layers = c.layers;
    in.hidden = c.hidden;
    in.heads = c.hidden / 64;
    in.vocab = 50257;
    in.micro_batch = 16;
    in.seq_len = 1024;
    in.gpus_per_node = c.gpus;
    in.loss_bytes_per_logit = 12;  // at::cross_entropy on an fp32 copy, as then
    const double total = find(estimate_model_states(in), 2, false, false).gpu_bytes + estimate_activation_bytes(in);
    EXPECT_NEAR(total / double(1ull << 30) / c.measured_gib, 1.0, 0.02) << c.params << " on " << c.gpus;
  }
}

// The new modes, measured on 2 x H200 (bench/run_zero3_gpu.sh, stratum-train,
// bf16, 2 GPUs; training peak of allocated bytes, docs/benchmarks.md). Errors
// of the estimate: gpt2-1.3b (seq 2048, micro 8) ZeRO-2 -0.5%, ZeRO-3 -1.4%,
// ZeRO-2 + offload -0.6%, ZeRO-3 + offload -1.6%; LLaMA (llama-8b's shape,
// micro 1, seq 1024, checkpointing) 16.75B ZeRO-3 -2.3%, 14.1B ZeRO-3 + offload
// -8.7%. The target is 10%. Measured before the fused cross-entropy
// (12 bytes a logit at the loss then).
TEST(MemoryEstimator, MatchesZero3OffloadAndCheckpointingPeaksMeasuredOnH200) {
  struct Case {
    int64_t params, layers, hidden, heads, vocab, largest, micro, seq;
    bool checkpointing;
    int stage;
    bool offload;
    double measured_gib;
  };
  const int64_t gpt2_13b = 1315723264, llama72 = 16754741248, llama60 = 14137397248;
  for (const Case& c : {Case{gpt2_13b, 24, 2048, 16, 50257, 50257 * 2048, 8, 2048, false, 2, false, 44.45},
                        Case{gpt2_13b, 24, 2048, 16, 50257, 50257 * 2048, 8, 2048, false, 3, false, 44.18},
                        Case{gpt2_13b, 24, 2048, 16, 50257, 50257 * 2048, 8, 2048, false, 2, true, 37.10},
                        Case{gpt2_13b, 24, 2048, 16, 50257, 50257 * 2048, 8, 2048, false, 3, true, 36.83},
                        Case{llama72, 72, 4096, 32, 128256, 128256 * 4096, 1, 1024, true, 3, false, 132.92},
                        Case{llama60, 60, 4096, 32, 128256, 128256 * 4096, 1, 1024, true, 3, true, 34.32}}) {
    EstimateInput in;
    in.params = c.params;
    in.layers = c.layers;
    in.hidden = c.hidden;
    in.heads = c.heads;
    in.vocab = c.vocab;
    in.largest_layer_params = c.largest;
    in.micro_batch = c.micro;
    in.seq_len = c.seq;
    in.activation_checkpointing = c.checkpointing;
    in.gpus_per_node = 2;
    if (c.vocab == 128256) {  // llama-8b's shape
      in.kv_heads = 8;
      in.ffn = 14336;
      in.gated_mlp = true;
    }
    in.loss_bytes_per_logit = 12;
    const double total =
        find(estimate_model_states(in), c.stage, c.offload, false).gpu_bytes + estimate_activation_bytes(in);
    EXPECT_NEAR(total / double(1ull << 30) / c.measured_gib, 1.0, 0.10)
        << c.params << " stage " << c.stage << (c.offload ? " offload" : "");
  }
}

// With this build's loss (the fused cross-entropy, the padded LM head),
// measured on 2 x H200 by bench_engine (bench/run_matrix.sh, bf16; training
// peak of allocated bytes, docs/benchmarks.md). Errors of the estimate:
// gpt2-1.3b seq 1024 micro 8 on 2 GPUs ZeRO-0 +1.2%, ZeRO-1 +1.5%, ZeRO-2
// +1.6%, ZeRO-3 +0.1%; on 1 GPU micro 16 +2.2%; llama-1b seq 2048 micro 4 on
// 2 GPUs ZeRO-2 -8.0%, ZeRO-3 -6.1% (SwiGLU's backward temporaries uncounted).
TEST(MemoryEstimator, MatchesPeaksWithTheFusedLossMeasuredOnH200) {
  struct Case {
    int64_t params, layers, hidden, heads, kv_heads, ffn, vocab, largest, micro, seq, gpus;
    int stage;
    double measured_gib;
  };
  const int64_t gpt2_13b = 1315723264, llama1b = 1235814400;
  const int64_t gpt2_emb = 50257 * 2048, llama_emb = 128256 * 2048;
  for (const Case& c : {Case{gpt2_13b, 24, 2048, 16, 16, 8192, 50257, gpt2_emb, 8, 1024, 2, 0, 33.51},
                        Case{gpt2_13b, 24, 2048, 16, 16, 8192, 50257, gpt2_emb, 8, 1024, 2, 1, 26.15},
                        Case{gpt2_13b, 24, 2048, 16, 16, 8192, 50257, gpt2_emb, 8, 1024, 2, 2, 24.93},
                        Case{gpt2_13b, 24, 2048, 16, 16, 8192, 50257, gpt2_emb, 8, 1024, 2, 3, 24.66},
                        Case{gpt2_13b, 24, 2048, 16, 16, 8192, 50257, gpt2_emb, 16, 1024, 1, 0, 47.15},
                        Case{llama1b, 16, 2048, 32, 8, 8192, 128256, llama_emb, 4, 2048, 2, 2, 27.74},
                        Case{llama1b, 16, 2048, 32, 8, 8192, 128256, llama_emb, 4, 2048, 2, 3, 27.53}}) {
    EstimateInput in;
    in.params = c.params;
    in.layers = c.layers;
    in.hidden = c.hidden;
    in.heads = c.heads;
    in.kv_heads = c.kv_heads;
    in.ffn = c.ffn;
    in.gated_mlp = c.vocab == 128256;
    in.vocab = c.vocab;
    in.largest_layer_params = c.largest;
    in.micro_batch = c.micro;
    in.seq_len = c.seq;
    in.gpus_per_node = c.gpus;
    const double total =
        find(estimate_model_states(in), c.stage, false, false).gpu_bytes + estimate_activation_bytes(in);
    EXPECT_NEAR(total / double(1ull << 30) / c.measured_gib, 1.0, 0.10)
        << c.params << " stage " << c.stage << " on " << c.gpus;
  }
}

TEST(MemoryEstimator, ProgramPrintsEveryStage) {
  FILE* p = ::popen((std::string(STRATUM_BIN_DIR) + "/stratum-estimate --params 7.5e9 --num_nodes 8 --num_gpus 8 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(st), 0) << out;
  EXPECT_NE(out.find("7.5B parameters"), std::string::npos) << out;
  EXPECT_NE(out.find("     3  none               none                     1.75"), std::string::npos) << out;
  FILE* q = ::popen((std::string(STRATUM_BIN_DIR) + "/stratum-estimate --model gpt2-124m --num_gpus 2 --micro-batch 8 2>&1").c_str(), "r");
  out.clear();
  while ((n = std::fread(buf, 1, sizeof buf, q)) > 0) out.append(buf, n);
  EXPECT_EQ(WEXITSTATUS(::pclose(q)), 0) << out;
  EXPECT_NE(out.find("activations:"), std::string::npos) << out;
  FILE* r = ::popen((std::string(STRATUM_BIN_DIR) + "/stratum-estimate 2>&1").c_str(), "r");
  out.clear();
  while ((n = std::fread(buf, 1, sizeof buf, r)) > 0) out.append(buf, n);
  EXPECT_EQ(WEXITSTATUS(::pclose(r)), 2) << out;
  EXPECT_NE(out.find("give exactly one of --params and --model"), std::string::npos) << out;
}
