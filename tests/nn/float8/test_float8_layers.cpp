// The "fp8" section: its parse-time rules, the engine's refusal on a device
// without FP8 GEMMs (the CPU), and the built-in models' projections in FP8
// (models/float8_layers.h) with exclude patterns, what they keep for
// backward, and the FP8 weight gradient written into a gradient sink or
// deferred to W (nn/linear.h), run on the CPU reference path directly (the
// engine would refuse the CPU).
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <limits>
#include <optional>

#include <c10/util/ThreadLocalDebugInfo.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#ifdef STRATUM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "stratum/config/config.h"
#include "stratum/core/error.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/float8_layers.h"
#include "stratum/models/model_config.h"
#include "stratum/nn/float8/float8_linear.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/mlp.h"
#include "stratum/nn/weight_grad_deferral.h"
#include "flat_sink.h"

namespace {

using namespace stratum;

std::string config_error(const std::string& text) {
  try {
    Config::from_string(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Fp8Config, ReadsTheSection) {
  const Config c = Config::from_string(R"({"train_batch_size": 8, "bf16": {"enabled": true},
      "fp8": {"enabled": true, "recipe": "rowwise", "exclude": ["c_proj", "layers.0.*"]}})");
  EXPECT_TRUE(c.fp8.enabled);
  EXPECT_EQ(c.fp8.recipe, config::Fp8Recipe::rowwise);
  EXPECT_EQ(c.fp8.exclude, (std::vector<std::string>{"c_proj", "layers.0.*"}));
  EXPECT_EQ(to_json(c)["fp8"]["recipe"], "rowwise");
  const Config off = Config::from_string(R"({"train_batch_size": 8, "fp8": {"enabled": false}})");
  EXPECT_FALSE(off.fp8.enabled);
  EXPECT_EQ(off.fp8.recipe, config::Fp8Recipe::tensorwise);
}

TEST(Fp8Config, RefusesWhatItCannotRun) {
  const std::string no_bf16 = config_error(R"({"train_batch_size": 8, "fp8": {"enabled": true}})");
  EXPECT_TRUE(has(no_bf16, "fp8.enabled") && has(no_bf16, "needs bf16 training")) << no_bf16;
  // Blockwise: accepted; the widths a GPU needs (multiples of 512) are the
  // model's, named at its first forward (Float8Engine.BlockwiseOnAGpu...).
  EXPECT_EQ(config_error(
                R"({"train_batch_size": 8, "bf16": {"enabled": true}, "fp8": {"enabled": true, "recipe": "blockwise"}})"),
            "");
  const std::string unknown_recipe = config_error(
      R"({"train_batch_size": 8, "bf16": {"enabled": true}, "fp8": {"enabled": true, "recipe": "delayed"}})");
  EXPECT_TRUE(has(unknown_recipe, "fp8.recipe")) << unknown_recipe;
  const std::string unknown_key = config_error(
      R"({"train_batch_size": 8, "bf16": {"enabled": true}, "fp8": {"enabled": true, "amax_history": 16}})");
  EXPECT_TRUE(has(unknown_key, "fp8.amax_history")) << unknown_key;
  const std::string bad_pattern = config_error(
      R"({"train_batch_size": 8, "bf16": {"enabled": true}, "fp8": {"enabled": true, "exclude": [""]}})");
  EXPECT_TRUE(has(bad_pattern, "fp8.exclude[0]")) << bad_pattern;
  // Tensor parallelism, pipeline stages and ZeRO-3 compose (tests/engine/test_float8_composition.cpp).
  EXPECT_EQ(config_error(R"({"train_batch_size": 8, "bf16": {"enabled": true},
      "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true}, "fp8": {"enabled": true}})"), "");
  EXPECT_EQ(config_error(R"({"train_batch_size": 8, "bf16": {"enabled": true},
      "pipeline": {"stages": 2}, "fp8": {"enabled": true}})"), "");
  EXPECT_EQ(config_error(R"({"train_batch_size": 8, "bf16": {"enabled": true},
      "zero_optimization": {"stage": 3}, "fp8": {"enabled": true}})"), "");
  const std::string lora = config_error(R"({"train_batch_size": 8, "bf16": {"enabled": true},
      "lora": {"enabled": true}, "fp8": {"enabled": true}})");
  EXPECT_TRUE(has(lora, "fp8.enabled") && has(lora, "lora")) << lora;
  // Off, nothing of it is checked against the rest.
  EXPECT_EQ(config_error(R"({"train_batch_size": 8, "fp8": {"enabled": false, "recipe": "blockwise"}})"), "");
}

models::ModelConfig tiny(const std::string& arch) {
  return models::make_model_config(arch == "gpt2" ? "tiny-gpt2" : "tiny-llama",
                                   {{"layers", "2"}, {"max_seq_len", "16"}, {"vocab_size", "96"}});
}

TEST(Fp8Engine, CpuRunRefusedWithAClearMessage) {
  const Config config = Config::from_string(
      R"({"train_batch_size": 2, "bf16": {"enabled": true}, "fp8": {"enabled": true}})", "fp8.json");
  auto model = models::build_model(tiny("gpt2"));
  try {
    // Refused before any collective: no communicator is reached.
    initialize(config, model, std::shared_ptr<distributed::Communicator>(), torch::kCPU);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(has(m, "fp8.json") && has(m, "fp8.enabled: training runs on the cpu") &&
                has(m, "CUDA GPU of compute capability >= 8.9"))
        << m;
  }
}

// STRATUM_FP8_CPU_EMULATION=1 (tests only) lets CPU ranks through the
// device check; unset, or set to anything else, the CPU is refused as above.
TEST(Fp8Engine, CpuEmulationOnlyWhenAsked) {
  const Config config = Config::from_string(
      R"({"train_batch_size": 2, "bf16": {"enabled": true}, "fp8": {"enabled": true}})", "fp8.json");
  unsetenv(engine_detail::kFloat8CpuEmulation);
  EXPECT_THROW(engine_detail::check_float8_device(config, torch::kCPU), ConfigError);
  setenv(engine_detail::kFloat8CpuEmulation, "yes", 1);
  EXPECT_THROW(engine_detail::check_float8_device(config, torch::kCPU), ConfigError);
  setenv(engine_detail::kFloat8CpuEmulation, "1", 1);
  EXPECT_NO_THROW(engine_detail::check_float8_device(config, torch::kCPU));
  unsetenv(engine_detail::kFloat8CpuEmulation);
}

// The weights' FP8 copies kept nowhere (ZeRO-3: W cast at each forward, Wᵀ
// in backward from the weights) give the cached copies' results bit for bit.
TEST(Fp8Layers, UncachedWeightsCastAlike) {
  namespace f8 = nn::float8;
  for (const f8::Recipe& recipe : {f8::tensorwise_recipe(), f8::rowwise_recipe()}) {
    SCOPED_TRACE(f8::recipe_name(recipe));
    torch::manual_seed(3);
    const at::Tensor x = torch::randn({24, 32}).to(torch::kBFloat16);
    const at::Tensor w0 = (torch::randn({16, 32}) * 0.1).to(torch::kBFloat16);
    const at::Tensor w1 = (torch::randn({8, 32}) * 0.3).to(torch::kBFloat16);
    const at::Tensor dy = torch::randn({24, 24}).to(torch::kBFloat16);
    std::vector<at::Tensor> got[2];
    for (bool hold : {true, false}) {
      auto cache = std::make_shared<f8::WeightCache>();
      cache->set_holds_weights(hold);
      f8::Float8Projection p("h.0.attn.c_attn", recipe, cache);
      const at::Tensor xl = x.clone().requires_grad_(), a = w0.clone().requires_grad_(), b = w1.clone().requires_grad_();
      f8::float8_linear(xl, {a, b}, at::Tensor(), p).backward(dy);
      const at::Tensor y = f8::float8_linear(x, {a, b}, at::Tensor(), p).detach();
      got[hold ? 0 : 1] = {y, xl.grad(), a.grad(), b.grad()};
      EXPECT_EQ(cache->casts(), hold ? 1 : 2);  // uncached: once a forward
    }
    for (size_t i = 0; i < got[0].size(); ++i) EXPECT_TRUE(at::equal(got[0][i], got[1][i])) << i;
  }
}

using test::FlatSink;

struct Fp8Backward {
  at::Tensor dx;
  std::vector<at::Tensor> grads;  // .grad() of each weight (a stand-in where the sink took it)
  int written = 0;                // weights whose sink was told
};

// The FP8 linear's backward of x [24, 32] through fresh leaves of `weights`
// (stacked), dy [24, Σ out]: with a sink putting weight i's gradient into
// dests[i] where dests are given, under a DeferWeightGrads scope on `queue`
// where one is given.
Fp8Backward fp8_backward(const nn::float8::Recipe& recipe, const std::vector<at::Tensor>& weights,
                         const std::vector<at::Tensor>& dests = {}, bool accumulate = false,
                         nn::DeferredWeightGrads* queue = nullptr) {
  namespace f8 = nn::float8;
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({24, 32}).to(torch::kBFloat16).requires_grad_();
  int64_t out = 0;
  for (const at::Tensor& w : weights) out += w.size(0);
  const at::Tensor dy = torch::randn({24, out}).to(torch::kBFloat16);
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& w : weights) leaves.push_back(w.clone().requires_grad_());
  std::optional<FlatSink> sink;
  if (!dests.empty()) sink.emplace(leaves, dests, accumulate);
  f8::Float8Projection p("h.0.attn.c_attn", recipe, std::make_shared<f8::WeightCache>());
  {
    std::optional<nn::DeferWeightGrads> defer;
    if (queue) defer.emplace(*queue);
    f8::float8_linear(x, leaves, at::Tensor(), p).backward(dy);
  }
  Fp8Backward b{x.grad(), {}, sink ? sink->written : 0};
  for (const at::Tensor& l : leaves) b.grads.push_back(l.grad());
  return b;
}

// The weights' destinations in one fp32 buffer (NaN: unwritten), each right
// after the one before, or `gap` elements further on.
std::vector<at::Tensor> flat_destinations(const std::vector<at::Tensor>& weights, int64_t gap = 0) {
  int64_t numel = gap * static_cast<int64_t>(weights.size());
  for (const at::Tensor& w : weights) numel += w.numel();
  const at::Tensor flat = at::full({numel}, std::numeric_limits<float>::quiet_NaN());
  std::vector<at::Tensor> dests;
  int64_t offset = 0;
  for (const at::Tensor& w : weights) {
    dests.push_back(flat.narrow(0, offset, w.numel()).view(w.sizes()));
    offset += w.numel() + gap;
  }
  return dests;
}

std::vector<std::vector<at::Tensor>> fp8_weight_sets() {
  torch::manual_seed(6);
  const at::Tensor w0 = (torch::randn({16, 32}) * 0.1).to(torch::kBFloat16);
  const at::Tensor w1 = (torch::randn({8, 32}) * 0.3).to(torch::kBFloat16);
  return {{w0}, {w0, w1}};  // one projection; two stacked (q/k/v, gate/up)
}

// Gradient-accumulation fusion (nn/linear.h) for FP8 projections: where a
// weight has a sink, dW = dyᵀ x is written (or added) into its fp32
// destination, for stacked weights at once where their destinations lie
// side by side. The fp32 product rounded to bf16 is autograd's bf16 dW bit
// for bit (off the GPU the product is summed in fp32 and rounded at the
// end), and it is kept in fp32 (not a bf16 gradient widened). Destinations
// apart: autograd's path.
TEST(Fp8Layers, WeightGradSinkTakesTheFp8Product) {
  namespace f8 = nn::float8;
  for (const f8::Recipe& recipe : {f8::tensorwise_recipe(), f8::rowwise_recipe(), f8::blockwise_recipe()})
    for (const std::vector<at::Tensor>& ws : fp8_weight_sets()) {
      SCOPED_TRACE(std::string(f8::recipe_name(recipe)) + ", " + std::to_string(ws.size()) + " weight(s)");
      const Fp8Backward ref = fp8_backward(recipe, ws);
      const std::vector<at::Tensor> dests = flat_destinations(ws);
      const Fp8Backward fused = fp8_backward(recipe, ws, dests);
      EXPECT_EQ(fused.written, static_cast<int>(ws.size()));
      EXPECT_TRUE(at::equal(fused.dx, ref.dx));
      for (size_t i = 0; i < ws.size(); ++i) {
        EXPECT_EQ(dests[i].scalar_type(), at::kFloat);
        EXPECT_TRUE(at::equal(dests[i].to(at::kBFloat16), ref.grads[i])) << i;
        EXPECT_FALSE(at::equal(dests[i], ref.grads[i].to(at::kFloat))) << i << ": written in fp32";
        EXPECT_TRUE(fused.grads[i].defined()) << i << ": autograd's hooks see a gradient";
      }
      // Accumulating: added to what the destination holds, in fp32.
      std::vector<at::Tensor> acc = flat_destinations(ws), before;
      for (at::Tensor& d : acc) before.push_back(d.normal_().clone());
      EXPECT_EQ(fp8_backward(recipe, ws, acc, /*accumulate=*/true).written, static_cast<int>(ws.size()));
      for (size_t i = 0; i < ws.size(); ++i) EXPECT_TRUE(at::equal(acc[i], before[i] + dests[i])) << i;
      if (ws.size() == 1) continue;
      // Not side by side: nothing written, autograd's bf16 gradients.
      const std::vector<at::Tensor> apart = flat_destinations(ws, /*gap=*/32);
      const Fp8Backward fallback = fp8_backward(recipe, ws, apart);
      EXPECT_EQ(fallback.written, 0);
      for (size_t i = 0; i < ws.size(); ++i) {
        EXPECT_TRUE(apart[i].isnan().all().item<bool>()) << i;
        EXPECT_TRUE(at::equal(fallback.grads[i], ref.grads[i])) << i;
      }
    }
}

// Under zero-bubble pipelines' DeferWeightGrads the FP8 dW GEMM is queued
// with its FP8 operands instead of run in B: the destination untouched and
// the sink told at once, the queued GEMM writing (or adding) the direct
// product bit for bit at run(). Weights without a sink keep autograd's path.
TEST(Fp8Layers, WeightGradDeferredUntilRun) {
  namespace f8 = nn::float8;
  for (const f8::Recipe& recipe : {f8::tensorwise_recipe(), f8::rowwise_recipe(), f8::blockwise_recipe()})
    for (const std::vector<at::Tensor>& ws : fp8_weight_sets())
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(std::string(f8::recipe_name(recipe)) + ", " + std::to_string(ws.size()) + " weight(s)" +
                     (accumulate ? ", accumulating" : ""));
        std::vector<at::Tensor> direct = flat_destinations(ws), deferred = flat_destinations(ws);
        for (size_t i = 0; i < ws.size(); ++i)
          if (accumulate) deferred[i].copy_(direct[i].normal_());
        const Fp8Backward now = fp8_backward(recipe, ws, direct, accumulate);
        std::vector<at::Tensor> before;
        for (const at::Tensor& d : deferred) before.push_back(d.clone());
        nn::DeferredWeightGrads queue;
        const Fp8Backward later = fp8_backward(recipe, ws, deferred, accumulate, &queue);
        EXPECT_EQ(queue.size(), 1u) << "one GEMM for the stacked weights";
        EXPECT_EQ(later.written, static_cast<int>(ws.size()));
        EXPECT_TRUE(at::equal(later.dx, now.dx)) << "B's input gradient";
        for (size_t i = 0; i < ws.size(); ++i)
          EXPECT_TRUE(at::allclose(deferred[i], before[i], 0, 0, /*equal_nan=*/true)) << i << ": untouched until W";
        queue.run();
        EXPECT_TRUE(queue.empty());
        for (size_t i = 0; i < ws.size(); ++i) EXPECT_TRUE(at::equal(deferred[i], direct[i])) << i;
      }
  nn::DeferredWeightGrads queue;
  const std::vector<at::Tensor> ws = fp8_weight_sets().back();
  const Fp8Backward plain = fp8_backward(f8::tensorwise_recipe(), ws, {}, false, &queue);
  EXPECT_TRUE(queue.empty()) << "no sink: nothing deferred";
  const Fp8Backward ref = fp8_backward(f8::tensorwise_recipe(), ws);
  for (size_t i = 0; i < ws.size(); ++i) EXPECT_TRUE(at::equal(plain.grads[i], ref.grads[i])) << i;
}

TEST(Fp8Engine, StepObserverInvalidatesTheWeightCopies) {
  // What the engine runs after each optimizer step (engine/float8_setup.h).
  auto cache = std::make_shared<nn::float8::WeightCache>();
  nn::float8::Float8Projection p("h.0.attn.c_attn", nn::float8::tensorwise_recipe(), cache);
  const at::Tensor w = torch::randn({16, 32}).to(torch::kBFloat16);
  p.weight({w});
  p.weight({w});
  EXPECT_EQ(cache->casts(), 1);
  const auto observer = engine_detail::float8_step_observer(cache);
  observer->after_step(/*updated=*/true);
  p.weight({w});
  EXPECT_EQ(cache->casts(), 2);
}

TEST(Fp8Layers, PatternsNameWholeTrailingParts) {
  using models::fp8_pattern_matches;
  EXPECT_TRUE(fp8_pattern_matches("c_attn", "transformer.h.0.attn.c_attn"));
  EXPECT_TRUE(fp8_pattern_matches("attn.c_proj", "transformer.h.0.attn.c_proj"));
  EXPECT_FALSE(fp8_pattern_matches("attn.c_proj", "transformer.h.0.mlp.c_proj"));
  EXPECT_FALSE(fp8_pattern_matches("tn.c_attn", "transformer.h.0.attn.c_attn"));
  EXPECT_TRUE(fp8_pattern_matches("h.1.*", "transformer.h.1.mlp.c_fc"));
  EXPECT_FALSE(fp8_pattern_matches("h.1.*", "transformer.h.11.mlp.c_fc"));
  EXPECT_TRUE(fp8_pattern_matches("*", "x.y"));
}

struct Pass {
  double loss;
  std::map<std::string, at::Tensor> grads;
};

Pass train_pass(models::CausalLMImpl& model, const at::Tensor& tokens) {
  model.zero_grad();
  const at::Tensor loss = model.forward(tokens, tokens);
  loss.backward();
  Pass p{loss.item<double>(), {}};
  for (const auto& item : model.named_parameters()) {
    EXPECT_TRUE(item.value().grad().defined()) << item.key();
    if (item.value().grad().defined()) p.grads[item.key()] = item.value().grad().to(torch::kFloat).clone();
  }
  return p;
}

double rel_err(const at::Tensor& a, const at::Tensor& b) { return ((a - b).norm() / b.norm()).item<double>(); }

void expect_fp8_model_near_bf16(const std::string& arch, const nn::float8::Recipe& recipe,
                                const std::vector<std::string>& exclude, size_t fp8_sites, size_t excluded) {
  SCOPED_TRACE(arch + " " + nn::float8::recipe_name(recipe));
  torch::manual_seed(4);
  auto model = models::build_model(tiny(arch));
  model->to(torch::kBFloat16);
  model->train();
  const at::Tensor tokens = torch::randint(0, 96, {2, 16}, torch::kLong);
  const Pass bf16 = train_pass(*model, tokens);
  const models::Float8Layers layers = models::apply_float8(*model, recipe, exclude);
  EXPECT_EQ(layers.fp8.size(), fp8_sites);
  EXPECT_EQ(layers.excluded.size(), excluded);
  const Pass fp8 = train_pass(*model, tokens);
  EXPECT_EQ(layers.cache->casts(), static_cast<int64_t>(fp8_sites));
  EXPECT_NEAR(fp8.loss, bf16.loss, 0.01 * bf16.loss);
  double worst = 0;
  for (const auto& [name, g] : bf16.grads) worst = std::max(worst, rel_err(fp8.grads.at(name), g));
  EXPECT_LT(worst, 0.15);
  std::printf("%s %s: loss %.5f (bf16 %.5f), worst gradient error %.4f\n", arch.c_str(),
              nn::float8::recipe_name(recipe), fp8.loss, bf16.loss, worst);
  // A second micro-batch reuses every weight's copy.
  train_pass(*model, tokens);
  EXPECT_EQ(layers.cache->casts(), static_cast<int64_t>(fp8_sites));
}

TEST(Fp8Layers, Gpt2ProjectionsInFp8NearBf16) {
  // 2 layers: c_attn, c_fc and the MLP's c_proj in FP8; the attention's c_proj excluded.
  expect_fp8_model_near_bf16("gpt2", nn::float8::tensorwise_recipe(), {"attn.c_proj"}, 6, 2);
  expect_fp8_model_near_bf16("gpt2", nn::float8::rowwise_recipe(), {}, 8, 0);
}

TEST(Fp8Layers, LlamaProjectionsInFp8NearBf16) {
  // Excluding k_proj keeps the stacked q/k/v GEMM in bf16 (all three or none).
  expect_fp8_model_near_bf16("llama", nn::float8::rowwise_recipe(), {"k_proj"}, 6, 2);
  expect_fp8_model_near_bf16("llama", nn::float8::tensorwise_recipe(), {}, 8, 0);
}

// What a model keeps: its weights' FP8 copies (W and Wᵀ, a byte each a
// projection parameter), and what the forward keeps for backward. Each
// projection keeps its input as FP8 bytes (its transposed copy, for dW)
// where bf16 keeps the input itself: a byte less an element where nothing
// else keeps that input (the norms' outputs, the activation's output), a
// byte more where attention keeps it anyway (o_proj's and c_proj's input).
// Per token and layer: LLaMA -(h + ffn) bytes, GPT-2 -5h (ffn 4h). The
// memory estimator counts the copies only (planning/memory_estimator.h).
// `allocated`: the device's bytes in use now; `device` CPU or CUDA.
void expect_fp8_keeps_copies_and_fp8_inputs(const c10::Device device, const std::function<int64_t()>& allocated) {
  const int64_t h = 512, batch = 2, seq = 256, layers = 2;
  for (const std::string arch : {"llama", "gpt2"}) {
    SCOPED_TRACE(arch + " on " + device.str());
    const int64_t ffn = arch == "gpt2" ? 4 * h : 1536, kv = arch == "gpt2" ? h : 128;
    const models::ModelConfig config = models::make_model_config(
        arch == "gpt2" ? "tiny-gpt2" : "tiny-llama",
        {{"layers", std::to_string(layers)}, {"max_seq_len", std::to_string(seq)}, {"vocab_size", "96"},
         {"hidden", std::to_string(h)}, {"heads", "8"}, {"kv_heads", std::to_string(kv / 64)},
         {"ffn_hidden", std::to_string(ffn)}});
    const at::Tensor tokens = torch::randint(0, 96, {batch, seq}, torch::kLong).to(device);
    // What a first pass leaves held at the second's start (the FP8 copies:
    // gradients are freed by zero_grad) and what the second's forward keeps
    // (its loss, a scalar, included).
    auto measure = [&](bool fp8) {
      torch::manual_seed(4);
      auto model = models::build_model(config);
      model->to(device, torch::kBFloat16);
      model->train();
      models::Float8Layers fp8_layers;
      if (fp8) fp8_layers = models::apply_float8(*model, nn::float8::tensorwise_recipe(), {});
      int64_t first_start = 0;
      std::pair<int64_t, int64_t> out;
      for (int pass = 0; pass < 2; ++pass) {
        model->zero_grad();
        const int64_t start = allocated();
        if (pass == 0) first_start = start;
        const at::Tensor loss = model->forward(tokens, tokens);
        out = {start - first_start, allocated() - start};
        loss.backward();
      }
      return out;
    };
    // Once each first: what a process allocates once (a GPU's GEMM workspaces) is then held.
    measure(false), measure(true);
    const auto [bf16_held, bf16_kept] = measure(false);
    const auto [fp8_held, fp8_kept] = measure(true);
    std::printf("%s on %s: a pass leaves %lld bytes held (bf16 %lld); the forward keeps %lld (bf16 %lld)\n",
                arch.c_str(), device.str().c_str(), (long long)fp8_held, (long long)bf16_held, (long long)fp8_kept,
                (long long)bf16_kept);
    const int64_t projections = layers * (arch == "gpt2" ? 4 * h * h + 2 * h * ffn : 2 * h * h + 2 * h * kv + 3 * h * ffn);
    EXPECT_NEAR(static_cast<double>(fp8_held - bf16_held), 2.0 * projections, 0.02 * 2.0 * projections);
    const int64_t tokens_layers = batch * seq * layers;
    const double saved = static_cast<double>(tokens_layers * (arch == "gpt2" ? 5 * h : h + ffn));
    EXPECT_NEAR(static_cast<double>(bf16_kept - fp8_kept), saved, 0.01 * saved);
  }
}

// The CPU allocator's bytes in use, as it reports them to a memory profiler
// at each allocation and free (of those made while this is installed).
struct CpuBytesInUse : c10::MemoryReportingInfoBase {
  std::atomic<int64_t> bytes{0};
  void reportMemoryUsage(void*, int64_t, size_t total_allocated, size_t, c10::Device device) override {
    if (device.type() == c10::DeviceType::CPU) bytes = static_cast<int64_t>(total_allocated);
  }
  bool memoryProfilingEnabled() const override { return true; }
  // Now: a one-byte allocation makes the allocator report its count.
  int64_t now() {
    const at::Tensor probe = at::empty({1}, at::kByte);
    return bytes - 1;
  }
};

TEST(Fp8Layers, KeepTheirWeightCopiesAndTheirInputsAsFp8Bytes) {
  auto in_use = std::make_shared<CpuBytesInUse>();
  c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, in_use);
  expect_fp8_keeps_copies_and_fp8_inputs(torch::kCPU, [&] { return in_use->now(); });
}

#ifdef STRATUM_WITH_CUDA
// The same on a GPU, where the norms and activations run Stratum's kernels
// that hand their amax to the casts, and the casts run as kernels.
TEST(Fp8LayersGpu, KeepTheirWeightCopiesAndTheirInputsAsFp8Bytes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU of compute capability >= 8.9 (FP8 GEMMs)";
  expect_fp8_keeps_copies_and_fp8_inputs(torch::kCUDA, [] {
    torch::cuda::synchronize();
    return static_cast<int64_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current);
  });
}
#endif

TEST(Fp8Layers, RefusesWhatItIsNotBuiltFor) {
  auto model = models::build_model(tiny("gpt2"));
  try {
    models::apply_float8(*model, nn::float8::tensorwise_recipe(), {"q_proj"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "fp8.exclude[0]: \"q_proj\" names no attention or MLP projection")) << e.what();
  }
  auto tiled = models::build_model(tiny("llama"));
  for (const auto& m : tiled->modules())
    if (auto* mlp = dynamic_cast<nn::SwiGLUMLPImpl*>(m.get())) mlp->tile_tokens = 8;
  EXPECT_THROW(models::apply_float8(*tiled, nn::float8::rowwise_recipe(), {}), Error);
}

}  // namespace
