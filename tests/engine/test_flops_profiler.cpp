// The engine's diagnostics: the flops profiler (flops_profiler section) and
// wall_clock_breakdown's timer lines.
//
// - The profiled forward flops per token, times 3, are within 5% of the
//   analytic 6N + 12·L·d·s (what stratum-train's MFU uses) for GPT-2 and
//   LLaMA at a shape where the matrix products dominate; ZeRO-3 with
//   activation checkpointing counts exactly the same.
// - A linear layer's MACs are exactly in·out·tokens (nothing counted twice
//   when at::linear calls addmm or matmul calls mm).
// - The printed block has DeepSpeed's headings, once, at the profiled step.
// - wall_clock_breakdown prints DeepSpeed's two lines every steps_per_print
//   steps, with positive times; without it nothing.
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks); rank 0 profiles and prints.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "../distributed/distributed_test_context.h"
#include "stratum/core/fs.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/flops_profiler.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/model_config.h"
#include "stratum/nn/linear.h"

using namespace stratum;

namespace {

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

struct LmRun {
  std::string printed;         // what the engine reported on this rank
  int64_t fwd_flops = 0;       // the profiler's (rank 0), summed over the step's micro-batches
  int64_t fwd_macs = 0;
  int64_t tokens = 0;          // this rank's tokens in the profiled step
  std::vector<ModuleProfile> layers;
};

std::string lm_config(int stage, int gas, const std::string& extra) {
  return R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": )" + std::to_string(gas) + R"(,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": )" + std::to_string(stage) + "}" + extra + "}";
}

// `steps` optimizer steps of random tokens through the engine.
LmRun train_lm(const models::ModelConfig& mcfg, const std::string& config_text, int steps) {
  auto world = test::context().cpu_world;
  Config config = Config::from_string(config_text, "flops-test.json");
  torch::manual_seed(3);
  auto model = models::build_model(mcfg);
  auto engine = initialize(config, model, world, torch::kCPU);
  LmRun run;
  engine.core().set_report_sink([&](const std::string& text) { run.printed += text + "\n"; });
  const auto& b = engine.core().batch();
  const int64_t seq = mcfg.max_seq_len;
  for (int s = 0; s < steps; ++s)
    for (int64_t k = 0; k < b.gradient_accumulation_steps; ++k) {
      at::Tensor tokens = at::randint(mcfg.vocab_size, {b.micro_batch_per_gpu, seq + 1}, at::kLong);
      at::Tensor loss = engine.forward(tokens.narrow(1, 0, seq), tokens.narrow(1, 1, seq));
      engine.backward(loss);
      engine.step();
    }
  run.tokens = b.micro_batch_per_gpu * b.gradient_accumulation_steps * seq;
  if (const FlopsProfiler* p = engine.core().flops_profiler()) {
    run.fwd_flops = p->model().flops;
    run.fwd_macs = p->model().macs;
    run.layers = p->layers();
  }
  return run;
}

// Hidden 256, 4 layers, seq 256, vocab 4096: the matrix products dominate,
// still small enough for a 2-core machine.
models::ModelConfig profiled_shape(const std::string& arch) {
  if (arch == "gpt2")
    return models::make_model_config("tiny-gpt2", {{"vocab_size", "4096"}, {"max_seq_len", "256"}, {"hidden", "256"},
                                                   {"layers", "4"}, {"heads", "4"}});
  return models::make_model_config("tiny-llama", {{"vocab_size", "4096"}, {"max_seq_len", "256"}, {"hidden", "256"},
                                                  {"layers", "4"}, {"heads", "4"}, {"kv_heads", "2"},
                                                  {"ffn_hidden", "704"}});
}

// The first step: the only one these runs take.
const std::string kProfileFirstStep = R"(, "flops_profiler": {"enabled": true, "profile_step": 0})";

}  // namespace

// Measured forward flops x 3 against 6N + 12·L·d·s per token, and the same
// count at ZeRO-3 with activation checkpointing (the layers run under no-grad
// and are recomputed in backward, which is not observed).
TEST(FlopsProfiler, ForwardFlopsMatchTheAnalyticCountAtEveryStage) {
  const bool lead = test::context().cpu_world->rank() == 0;
  for (const std::string arch : {"gpt2", "llama"}) {
    const models::ModelConfig mcfg = profiled_shape(arch);
    // Every rank trains (the runs are collective); rank 0 profiles.
    const LmRun run = train_lm(mcfg, lm_config(0, 2, kProfileFirstStep), 1);
    const LmRun z3 = train_lm(mcfg, lm_config(3, 2, kProfileFirstStep + R"(, "activation_checkpointing": {})"), 1);
    const LmRun z2 = train_lm(mcfg, lm_config(2, 1, kProfileFirstStep), 1);
    if (!lead) {
      EXPECT_EQ(run.fwd_flops + z3.fwd_flops + z2.fwd_flops, 0) << "only rank 0 profiles";
      continue;
    }
    ASSERT_GT(run.fwd_flops, 0) << arch;
    const double analytic = 6.0 * static_cast<double>(models::parameter_count(mcfg)) +
                            12.0 * mcfg.layers * mcfg.hidden * static_cast<double>(mcfg.max_seq_len);
    const double measured = 3.0 * static_cast<double>(run.fwd_flops) / static_cast<double>(run.tokens);
    const double diff = (measured - analytic) / analytic;
    std::printf("[flops] %s: measured 3 x fwd flops/token %.0f, analytic 6N + 12Lds %.0f, difference %+.2f%%\n",
                arch.c_str(), measured, analytic, 100.0 * diff);
    EXPECT_LT(std::abs(diff), 0.05) << arch << ": measured " << measured << " vs analytic " << analytic;
    // The matrix products are 2 flops a MAC; only addmm's added bias comes on top.
    EXPECT_GE(run.fwd_flops, 2 * run.fwd_macs);
    EXPECT_LT(run.fwd_flops, 2 * run.fwd_macs + run.fwd_macs / 100);

    // ZeRO-3, activation checkpointing: the same forward, counted the same.
    EXPECT_EQ(z3.fwd_flops, run.fwd_flops) << arch << " at ZeRO-3 with activation checkpointing";
    ASSERT_EQ(z3.layers.size(), run.layers.size());
    for (size_t i = 0; i < run.layers.size(); ++i) EXPECT_EQ(z3.layers[i].macs, run.layers[i].macs) << arch << " layer " << i;
    EXPECT_EQ(2 * z2.fwd_flops, run.fwd_flops) << arch << " at ZeRO-2, one micro-batch a step instead of two";
  }
}

namespace {

// A LayerStack of two linear layers (with and without bias) and a loss.
class LinearLayer : public nn::StackLayer {
 public:
  LinearLayer(int64_t in, int64_t out, bool bias) : StackLayer("LinearLayer") {
    fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
  }
  at::Tensor forward(const at::Tensor& x) override { return nn::linear(x, fc->weight, fc->bias); }
  torch::nn::Linear fc{nullptr};
};

class TwoLinears : public nn::LayerStackImpl {
 public:
  TwoLinears(int64_t in, int64_t mid, int64_t out) : nn::LayerStackImpl("TwoLinears") {
    append(std::make_shared<LinearLayer>(in, mid, true), "a");
    append(std::make_shared<LinearLayer>(mid, out, false), "b");
  }
  at::Tensor forward(const at::Tensor& x) { return nn::LayerStackImpl::forward(x).square().mean(); }
};

}  // namespace

TEST(FlopsProfiler, LinearLayerMacsAreExactlyInTimesOutTimesTokens) {
  auto world = test::context().cpu_world;
  Config config = Config::from_string(R"({"train_micro_batch_size_per_gpu": 3, "optimizer": {"type": "Adam"},
      "flops_profiler": {"enabled": true, "profile_step": 0}})");
  const int64_t in = 48, mid = 80, out = 24, batch = 3, seq = 5;
  auto model = std::make_shared<TwoLinears>(in, mid, out);
  auto engine = initialize(config, model, world, torch::kCPU);
  std::string printed;
  engine.core().set_report_sink([&](const std::string& text) { printed += text + "\n"; });
  for (int s = 0; s < 2; ++s) {
    at::Tensor loss = engine.forward(at::randn({batch, seq, in}));
    engine.backward(loss);
    engine.step();
  }
  const FlopsProfiler* p = engine.core().flops_profiler();
  if (world->rank() != 0) {
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(printed, "");
    return;
  }
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->layers().size(), 2u);
  const int64_t tokens = batch * seq;
  EXPECT_EQ(p->layers()[0].macs, in * mid * tokens);
  EXPECT_EQ(p->layers()[0].flops, 2 * in * mid * tokens) << "DeepSpeed's linear: the bias is not counted";
  EXPECT_EQ(p->layers()[1].macs, mid * out * tokens);
  EXPECT_EQ(p->model().macs, (in * mid + mid * out) * tokens) << "the loss is elementwise: no MACs";
  EXPECT_EQ(p->forward_passes(), 1);
  EXPECT_EQ(p->outline().layers[0].params, in * mid + mid);
  EXPECT_EQ(p->outline().model.params, in * mid + mid + mid * out);
  EXPECT_GT(p->layers()[0].seconds, 0.0);
  EXPECT_NE(printed.find("(layers.0): LinearLayer(3.92 K = 67.12% Params, 57.6 KMACs = 66.67% MACs"),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("fwd MACs per GPU:"), std::string::npos) << printed;
}

TEST(FlopsProfiler, OpCostsFromShapes) {
  const auto costs = [](const char* op, const std::vector<c10::IValue>& in) {
    return op_cost(op, c10::ArrayRef<const c10::IValue>(in.data(), in.size()));
  };
  const auto cost = [&](const char* op, const std::vector<c10::IValue>& in) {
    const std::optional<OpCost> c = costs(op, in);
    return c ? c->macs : -1;
  };
  const auto t = [](std::vector<int64_t> sizes) { return c10::IValue(at::empty(sizes)); };
  EXPECT_EQ(cost("aten::mm", {t({7, 5}), t({5, 3})}), 7 * 5 * 3);
  EXPECT_EQ(cost("aten::bmm", {t({2, 7, 5}), t({2, 5, 3})}), 2 * 7 * 5 * 3);
  EXPECT_EQ(cost("aten::matmul", {t({4, 1, 7, 5}), t({6, 5, 3})}), 4 * 6 * 7 * 5 * 3) << "broadcast batch";
  EXPECT_EQ(cost("aten::matmul", {t({7, 5}), t({5})}), 35);
  EXPECT_EQ(cost("aten::linear", {t({2, 9, 16}), t({32, 16}), c10::IValue()}), 2 * 9 * 16 * 32);
  const std::optional<OpCost> addmm = costs("aten::addmm", {t({3}), t({7, 5}), t({5, 3})});
  ASSERT_TRUE(addmm);
  EXPECT_EQ(addmm->flops, 2 * 105 + 3) << "DeepSpeed's addmm: the added term's elements too";
  // q [b, h, s, d] with 2 kv heads for 8 query heads: 2·b·h·s²·d MACs (4·b·h·s²·d flops), causal or not.
  const int64_t b = 2, h = 8, s = 16, d = 32;
  const std::optional<OpCost> sdpa = costs("aten::scaled_dot_product_attention",
                                           {t({b, h, s, d}), t({b, 2, s, d}), t({b, 2, s, d})});
  ASSERT_TRUE(sdpa);
  EXPECT_EQ(sdpa->flops, 4 * b * h * s * s * d);
  EXPECT_EQ(cost("aten::_flash_attention_forward", {t({b, s, h, d}), t({b, s, 2, d}), t({b, s, 2, d})}),
            2 * b * h * s * s * d)
      << "[b, s, h, d] layout";
  EXPECT_EQ(cost("stratum::linear_bias_gelu", {t({10, 16}), t({64, 16}), t({64})}), 10 * 16 * 64);
  EXPECT_EQ(cost("aten::add", {t({3}), t({3})}), -1);
  EXPECT_FALSE(is_costed_op("aten::gelu"));
}

TEST(FlopsProfiler, PrintsDeepSpeedsBlockOnceAtTheProfiledStep) {
  const bool lead = test::context().cpu_world->rank() == 0;
  const models::ModelConfig mcfg = models::make_model_config("tiny-gpt2");
  const LmRun run = train_lm(mcfg, lm_config(1, 1, R"(, "flops_profiler": {"enabled": true, "profile_step": 2, "top_modules": 2})"), 4);
  // module_depth 0 and detailed false: the model only, no tree; output_file: the block goes there.
  const std::string dir = fs::make_temp_directory("stratum_flops_");
  const LmRun quiet = train_lm(mcfg, lm_config(0, 1, R"(, "flops_profiler": {"enabled": true, "profile_step": 0,
      "module_depth": 0, "detailed": false, "output_file": ")" + dir + R"(/sub/profile.txt"})"), 1);
  if (!lead) {
    EXPECT_EQ(run.printed + quiet.printed, "") << "rank 0 prints";
    EXPECT_FALSE(fs::exists(dir + "/sub/profile.txt")) << "rank 0 writes";
    fs::remove_tree(dir);
    return;
  }
  const std::string& p = run.printed;
  EXPECT_EQ(count_of(p, "-------------------------- DeepSpeed Flops Profiler --------------------------"), 1) << p;
  for (const char* heading :
       {"Profile Summary at step 2:", "world size: ", "data parallel size: ", "model parallel size: ",
        "batch size per GPU: ", "params per GPU: ", "fwd MACs per GPU: ", "fwd flops per GPU: ", "fwd latency: ",
        "fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", "bwd latency: ",
        "bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency: ",
        "fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency): ", "step latency: ", "iter latency: ",
        "FLOPS per GPU = 3 * fwd flops per GPU / iter latency: ", "samples/second: ",
        "----------------------------- Aggregated Profile per GPU -----------------------------",
        "Top 2 modules in terms of params, MACs or fwd latency at different model depths:", "depth 0:", "depth 1:",
        "    params      - {'GPT2Block': ", "    MACs        - {'GPT2Block': ",
        "------------------------------ Detailed Profile per GPU ------------------------------",
        "GPT2LMHeadModel(\n  ", "(layers.1): GPT2Block(", ", transformer.h.0)\n", "(layers.4): LMHead("})
    EXPECT_NE(p.find(heading), std::string::npos) << "missing \"" << heading << "\" in\n" << p;
  char params_line[160];
  std::snprintf(params_line, sizeof params_line, "%-70s  %s\n", "params per GPU: ",
                profile_params(static_cast<double>(models::parameter_count(mcfg))).c_str());
  EXPECT_NE(p.find(params_line), std::string::npos) << "want " << params_line << p;
  EXPECT_NE(quiet.printed.find("the profile of step 0 is in " + dir + "/sub/profile.txt"), std::string::npos)
      << quiet.printed;
  std::ifstream file(dir + "/sub/profile.txt");
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find("DeepSpeed Flops Profiler"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("depth 0:"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("depth 1:"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("Detailed Profile per GPU"), std::string::npos) << text.str();
  fs::remove_tree(dir);
}

namespace {

// "time (ms) | fwd_microstep: 1.23 | ..." -> {name: value}.
std::map<std::string, double> timer_fields(const std::string& line) {
  std::map<std::string, double> out;
  static const std::regex field(R"(\| ([a-z_]+): ([0-9]+\.[0-9]{2}))");
  for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it)
    out[(*it)[1]] = std::stod((*it)[2]);
  return out;
}

}  // namespace

TEST(WallClockBreakdown, PrintsDeepSpeedsLinesEveryStepsPerPrint) {
  const bool lead = test::context().cpu_world->rank() == 0;
  const models::ModelConfig mcfg = models::make_model_config("tiny-gpt2", {{"max_seq_len", "64"}});
  const LmRun run = train_lm(mcfg, lm_config(2, 2, R"(, "wall_clock_breakdown": true, "steps_per_print": 2)"), 5);
  if (!lead) {
    EXPECT_EQ(run.printed, "");
  } else {
    std::vector<std::string> lines;
    std::stringstream ss(run.printed);
    for (std::string l; std::getline(ss, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), 4u) << "steps 2 and 4 of 5, two lines each:\n" << run.printed;
    for (size_t i = 0; i < lines.size(); ++i) {
      const bool micro = i % 2 == 0;
      const std::string suffix = micro ? "_microstep" : "";
      EXPECT_EQ(lines[i].rfind("time (ms) | fwd" + suffix + ": ", 0), 0u) << lines[i];
      std::map<std::string, double> f = timer_fields(lines[i]);
      ASSERT_EQ(f.size(), 5u) << lines[i];
      for (const char* name : {"fwd", "bwd", "bwd_inner", "step"}) EXPECT_GT(f[name + suffix], 0.0) << lines[i];
      EXPECT_GE(f["bwd_allreduce" + suffix], 0.0) << lines[i];
      EXPECT_NEAR(f["bwd" + suffix], f["bwd_inner" + suffix] + f["bwd_allreduce" + suffix], 0.016) << lines[i];
    }
    // Two micro-steps a step: a step's times are about twice a micro-step's
    // (the step's update falls in one micro-step of two: its average halves).
    const auto micro = timer_fields(lines[0]), step = timer_fields(lines[1]);
    EXPECT_NEAR(step.at("fwd"), 2 * micro.at("fwd_microstep"), 0.011 * 2);
    EXPECT_NEAR(step.at("step"), 2 * micro.at("step_microstep"), 0.011 * 2);
  }
  const LmRun off = train_lm(mcfg, lm_config(2, 2, R"(, "steps_per_print": 1)"), 2);
  EXPECT_EQ(off.printed, "") << "wall_clock_breakdown is off";
}
