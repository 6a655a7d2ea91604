// adam_step (torch's fused kernels) against torch::optim::AdamW / Adam over 20
// steps with a changing lr. Tolerance: max abs difference <= 1e-6 on params of
// order 1 (both are fp32; they differ only in rounding order).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "stratum/core/error.h"
#include "stratum/optim/adam.h"

using namespace stratum;
using namespace stratum::optim;

namespace {

constexpr double kTol = 1e-6;
constexpr int kSteps = 20;
constexpr int64_t kNumel = 4099;

double lr_at(int step) { return 1e-2 * (1.0 + 0.5 * std::sin(0.7 * step)); }
double beta1_at(int step) { return 0.85 + 0.005 * step; }

config::OptimizerConfig make_config(config::OptimizerType type, bool adam_w_mode, double weight_decay) {
  config::OptimizerConfig c;
  c.type = type;
  c.adam_w_mode = adam_w_mode;
  c.lr = 1e-2;
  c.beta1 = 0.9;
  c.beta2 = 0.98;
  c.eps = 1e-7;
  c.weight_decay = weight_decay;
  return c;
}

std::vector<at::Tensor> random_grads(int64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> grads;
  for (int k = 0; k < kSteps; ++k) grads.push_back(torch::randn({kNumel}) * (0.1 + k));
  return grads;
}

// Runs both for kSteps; returns the max abs difference of the params seen after any step.
template <class TorchOptimizer, class TorchOptions>
double max_diff_against(const config::OptimizerConfig& c, bool vary_beta1) {
  torch::manual_seed(1);
  const at::Tensor init = torch::randn({kNumel});
  const auto grads = random_grads(2);

  at::Tensor ours = init.clone();
  AdamState state = make_adam_state(ours);
  at::Tensor theirs = init.clone().requires_grad_(true);
  TorchOptimizer reference({theirs}, TorchOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(
                                         c.weight_decay));
  auto& options = static_cast<TorchOptions&>(reference.param_groups()[0].options());

  double worst = 0.0;
  for (int k = 0; k < kSteps; ++k) {
    const std::optional<double> beta1 = vary_beta1 ? std::optional<double>(beta1_at(k)) : std::nullopt;
    adam_step(ours, grads[k].clone(), state, c, lr_at(k), beta1);

    options.lr(lr_at(k));
    options.betas({beta1.value_or(c.beta1), c.beta2});
    theirs.mutable_grad() = grads[k].clone();
    reference.step();
    worst = std::max(worst, (ours - theirs.detach()).abs().max().item<double>());
  }
  EXPECT_EQ(state.step.item<float>(), static_cast<float>(kSteps));
  EXPECT_GT((ours - init).abs().max().item<double>(), 1e-2);  // it did move
  return worst;
}

}  // namespace

TEST(Adam, AdamWMatchesTorchWithoutWeightDecay) {
  const auto c = make_config(config::OptimizerType::AdamW, true, 0.0);
  EXPECT_LE((max_diff_against<torch::optim::AdamW, torch::optim::AdamWOptions>(c, false)), kTol);
}

TEST(Adam, AdamWMatchesTorchWithWeightDecay) {
  const auto c = make_config(config::OptimizerType::AdamW, true, 0.1);
  EXPECT_LE((max_diff_against<torch::optim::AdamW, torch::optim::AdamWOptions>(c, false)), kTol);
}

// DeepSpeed's "Adam" is AdamW unless adam_w_mode is false.
TEST(Adam, AdamWithAdamWModeIsDecoupled) {
  const auto c = make_config(config::OptimizerType::Adam, true, 0.1);
  EXPECT_TRUE(decoupled_weight_decay(c));
  EXPECT_LE((max_diff_against<torch::optim::AdamW, torch::optim::AdamWOptions>(c, false)), kTol);
}

TEST(Adam, AdamL2MatchesTorchAdam) {
  auto c = make_config(config::OptimizerType::Adam, false, 0.1);
  EXPECT_FALSE(decoupled_weight_decay(c));
  EXPECT_LE((max_diff_against<torch::optim::Adam, torch::optim::AdamOptions>(c, false)), kTol);
  c.weight_decay = 0.0;
  EXPECT_LE((max_diff_against<torch::optim::Adam, torch::optim::AdamOptions>(c, false)), kTol);
}

TEST(Adam, Beta1OverrideMatchesTorchWithChangingBetas) {
  const auto c = make_config(config::OptimizerType::AdamW, true, 0.01);
  EXPECT_LE((max_diff_against<torch::optim::AdamW, torch::optim::AdamWOptions>(c, true)), kTol);
}

// grad_scale: the kernel divides the grads, so scaled grads + grad_scale equal
// pre-divided grads (bit for bit with a power of two), and the grads it was given
// come back unscaled.
TEST(Adam, GradScaleUnscalesInsideTheKernel) {
  const auto c = make_config(config::OptimizerType::AdamW, true, 0.1);
  const auto grads = random_grads(3);
  torch::manual_seed(4);
  const at::Tensor init = torch::randn({kNumel});
  for (double scale : {1024.0, 3.0}) {
    at::Tensor plain = init.clone(), scaled = init.clone();
    AdamState plain_state = make_adam_state(plain), scaled_state = make_adam_state(scaled);
    for (int k = 0; k < kSteps; ++k) {
      adam_step(plain, grads[k].clone(), plain_state, c, lr_at(k), std::nullopt);
      at::Tensor g = grads[k] * scale;
      adam_step(scaled, g, scaled_state, c, lr_at(k), std::nullopt, scale);
      EXPECT_LE((g - grads[k]).abs().max().item<double>(), 1e-5) << "grads not unscaled in place";
    }
    const double diff = (plain - scaled).abs().max().item<double>();
    if (scale == 1024.0)
      EXPECT_EQ(diff, 0.0);
    else
      EXPECT_LE(diff, kTol) << "scale " << scale;
  }
}

TEST(Adam, FoundInfLeavesEverythingUntouched) {
  const auto c = make_config(config::OptimizerType::AdamW, true, 0.1);
  at::Tensor p = torch::randn({kNumel});
  const at::Tensor before = p.clone();
  AdamState state = make_adam_state(p);
  adam_step(p, torch::randn({kNumel}), state, c, 1e-2, std::nullopt, 1.0, torch::ones({1}));
  EXPECT_TRUE(torch::equal(p, before));
  EXPECT_EQ(state.step.item<float>(), 0.0f);
  EXPECT_EQ(state.exp_avg.abs().max().item<float>(), 0.0f);
  adam_step(p, torch::randn({kNumel}), state, c, 1e-2, std::nullopt, 1.0, torch::zeros({1}));
  EXPECT_FALSE(torch::equal(p, before));
  EXPECT_EQ(state.step.item<float>(), 1.0f);
}

// Against a double-precision reference fp32 drifts further than against
// torch's fp32 (20 steps of rounding; torch's own fp32 Adam-L2 is 1.7e-5 off it
// on the 65537-element case): max abs difference <= 1e-5 on params up to ~4.5.
// Ignoring the flag would be off by ~1e-2 (the first steps' 1 / (1 - b1^t)).
constexpr double kDoubleReferenceTol = 1e-5;

// bias_correction false (DeepSpeed's FusedAdam / CPUAdam with bias_correction
// False; torch's fused kernels cannot do it): against the update written here
// in double, m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p -= lr m / (sqrt(v) + eps), after p *= 1 - lr wd (decoupled) or g += wd p (L2).
static double max_diff_uncorrected(const config::OptimizerConfig& c, double grad_scale, bool vary_beta1) {
  torch::manual_seed(1);
  const at::Tensor init = torch::randn({kNumel});
  const auto grads = random_grads(2);
  at::Tensor ours = init.clone();
  AdamState state = make_adam_state(ours);
  at::Tensor p = init.to(torch::kDouble), m = torch::zeros_like(p), v = torch::zeros_like(p);
  const bool decoupled = decoupled_weight_decay(c);
  double worst = 0.0;
  for (int k = 0; k < kSteps; ++k) {
    const double lr = lr_at(k), beta1 = vary_beta1 ? beta1_at(k) : c.beta1;
    at::Tensor g_in = grads[k] * grad_scale;
    adam_step(ours, g_in, state, c, lr, vary_beta1 ? std::optional<double>(beta1) : std::nullopt, grad_scale);
    EXPECT_LE((g_in - grads[k]).abs().max().item<double>(), 1e-5) << "grads not unscaled in place";
    at::Tensor g = grads[k].to(torch::kDouble);
    if (decoupled) p = p * (1 - lr * c.weight_decay);
    else g = g + c.weight_decay * p;
    m = beta1 * m + (1 - beta1) * g;
    v = c.beta2 * v + (1 - c.beta2) * g * g;
    p = p - lr * m / (v.sqrt() + c.eps);
    worst = std::max(worst, (ours.to(torch::kDouble) - p).abs().max().item<double>());
  }
  EXPECT_EQ(state.step.item<float>(), static_cast<float>(kSteps));
  EXPECT_GT((ours - init).abs().max().item<double>(), 1e-2);  // it did move
  return worst;
}

TEST(Adam, WithoutBiasCorrectionMatchesTheUncorrectedUpdate) {
  for (bool decoupled : {true, false})
    for (double wd : {0.0, 0.1})
      for (double scale : {1.0, 4.0}) {
        auto c = make_config(decoupled ? config::OptimizerType::AdamW : config::OptimizerType::Adam, decoupled, wd);
        c.bias_correction = false;
        const double diff = max_diff_uncorrected(c, scale, /*vary_beta1=*/scale != 1.0);
        EXPECT_LE(diff, kDoubleReferenceTol) << (decoupled ? "AdamW" : "Adam-L2") << " wd " << wd << " scale " << scale;
        std::printf("  %-7s wd %.1f scale %.0f: max |ours - reference| = %.3g\n", decoupled ? "AdamW" : "Adam-L2", wd,
                    scale, diff);
      }
}

// The flag is not ignored: the first steps differ by the factors 1 / (1 - b^t).
TEST(Adam, BiasCorrectionFlagChangesTheStep) {
  auto on = make_config(config::OptimizerType::AdamW, true, 0.0), off = on;
  off.bias_correction = false;
  at::Tensor a = torch::zeros({8}), b = torch::zeros({8});
  AdamState sa = make_adam_state(a), sb = make_adam_state(b);
  adam_step(a, torch::ones({8}), sa, on, 1e-2, std::nullopt);
  adam_step(b, torch::ones({8}), sb, off, 1e-2, std::nullopt);
  // Corrected: m^ / sqrt(v^) = 1; uncorrected: 0.1 / (sqrt(0.02) + eps).
  EXPECT_NEAR(a[0].item<double>(), -1e-2, 1e-7);
  EXPECT_NEAR(b[0].item<double>(), -1e-2 * 0.1 / (std::sqrt(0.02) + 1e-7), 1e-7);
}

TEST(Adam, WithoutBiasCorrectionFoundInfLeavesEverythingUntouched) {
  auto c = make_config(config::OptimizerType::Adam, false, 0.1);
  c.bias_correction = false;
  at::Tensor p = torch::randn({kNumel});
  const at::Tensor before = p.clone();
  AdamState state = make_adam_state(p);
  at::Tensor g = torch::randn({kNumel});
  g[5] = INFINITY;
  adam_step(p, g, state, c, 1e-2, std::nullopt, 2.0, torch::ones({1}));
  EXPECT_TRUE(torch::equal(p, before));
  EXPECT_EQ(state.step.item<float>(), 0.0f);
  EXPECT_EQ(state.exp_avg.abs().max().item<float>(), 0.0f);
  EXPECT_EQ(state.exp_avg_sq.abs().max().item<float>(), 0.0f);
  adam_step(p, torch::randn({kNumel}), state, c, 1e-2, std::nullopt, 1.0, torch::zeros({1}));
  EXPECT_FALSE(torch::equal(p, before));
  EXPECT_EQ(state.step.item<float>(), 1.0f);
}

TEST(Adam, RejectsWrongTensors) {
  const auto c = make_config(config::OptimizerType::AdamW, true, 0.0);
  at::Tensor p = torch::zeros({8});
  AdamState state = make_adam_state(p);
  EXPECT_EQ(state.step.dim(), 0);
  EXPECT_THROW(adam_step(p, torch::zeros({7}), state, c, 1e-3, std::nullopt), Error);
  EXPECT_THROW(adam_step(p, torch::zeros({8}, torch::kHalf), state, c, 1e-3, std::nullopt), Error);
  at::Tensor half = torch::zeros({8}, torch::kHalf);
  EXPECT_THROW(adam_step(half, torch::zeros({8}), state, c, 1e-3, std::nullopt), Error);
}

// adam_step_mixed (Stratum's CUDA kernel) against adam_step on the widened
// gradient, 20 steps with a changing lr and a grad scale: masters and moments
// within 1e-6 (both fp32, same operation order), params16 exactly the masters
// rounded. Both the vectorized (aligned, n % 4 == 0) and the scalar path run.
TEST(AdamMixed, MatchesAdamStepOnTheWidenedGradientOnAGpu) {
  if (!torch::cuda::is_available() || !mixed_adam_available(c10::Device(c10::kCUDA, 0)))
    GTEST_SKIP() << "needs a GPU and a build with Stratum's CUDA kernels";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  for (auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    for (bool decoupled : {true, false}) {
      for (int64_t offset : {int64_t{0}, int64_t{1}}) {  // 1: unaligned, n odd -> scalar path
        const auto c = make_config(decoupled ? config::OptimizerType::AdamW : config::OptimizerType::Adam, decoupled,
                                   0.1);
        torch::manual_seed(3);
        at::Tensor base = torch::randn({kNumel + 1}, cuda);
        at::Tensor ref = base.narrow(0, offset, kNumel).clone();
        at::Tensor mine_storage = base.clone();
        at::Tensor mine = mine_storage.narrow(0, offset, kNumel);
        AdamState ref_state = make_adam_state(ref);
        at::Tensor m_storage = torch::zeros({kNumel + 1}, cuda), v_storage = torch::zeros({kNumel + 1}, cuda);
        AdamState state{m_storage.narrow(0, offset, kNumel), v_storage.narrow(0, offset, kNumel),
                        torch::zeros({}, cuda)};
        at::Tensor params16 = torch::empty({kNumel}, cuda.dtype(dtype == torch::kFloat ? torch::kBFloat16 : dtype));
        const at::Tensor scale = torch::full({}, 4.0, cuda);
        for (int k = 0; k < kSteps; ++k) {
          at::Tensor g = (torch::randn({kNumel}, cuda) * (0.1 + k) * 4.0).to(dtype);
          const at::Tensor g_before = g.clone();
          // A copy: torch's fused Adam writes the unscaled gradient back into its argument.
          adam_step(ref, g.to(torch::kFloat, false, /*copy=*/true), ref_state, c, lr_at(k), std::nullopt, scale);
          adam_step_mixed(mine, g, state, c, lr_at(k), std::nullopt, scale, params16);
          EXPECT_TRUE(torch::equal(g, g_before)) << "the gradient was modified";
        }
        const std::string what = std::string(c10::toString(dtype)) + (decoupled ? " AdamW" : " Adam-L2") +
                                 (offset ? " scalar" : " vec4");
        // Relative to the largest value: the second moment reaches hundreds here.
        auto rel = [](const at::Tensor& a, const at::Tensor& b) {
          return ((a - b).abs().max() / b.abs().max().clamp_min(1.0)).item<double>();
        };
        EXPECT_LE(rel(mine, ref), kTol) << what;
        EXPECT_LE(rel(state.exp_avg, ref_state.exp_avg), kTol) << what;
        EXPECT_LE(rel(state.exp_avg_sq, ref_state.exp_avg_sq), kTol) << what;
        EXPECT_TRUE(torch::equal(params16, mine.to(params16.scalar_type()))) << what;
        EXPECT_EQ(state.step.item<float>(), float(kSteps));
        // Neighbours of the narrowed buffers are untouched.
        if (offset) EXPECT_EQ(mine_storage[0].item<float>(), base[0].item<float>()) << what;
      }
    }
  }
}

// The kernel's bias_correction false against adam_step's (ATen ops on the GPU).
TEST(AdamMixed, WithoutBiasCorrectionMatchesAdamStepOnAGpu) {
  if (!torch::cuda::is_available() || !mixed_adam_available(c10::Device(c10::kCUDA, 0)))
    GTEST_SKIP() << "needs a GPU and a build with Stratum's CUDA kernels";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  for (bool decoupled : {true, false}) {
    auto c = make_config(decoupled ? config::OptimizerType::AdamW : config::OptimizerType::Adam, decoupled, 0.1);
    c.bias_correction = false;
    torch::manual_seed(3);
    at::Tensor ref = torch::randn({kNumel}, cuda), mine = ref.clone();
    AdamState ref_state = make_adam_state(ref), state = make_adam_state(mine);
    const at::Tensor scale = torch::full({}, 4.0, cuda);
    for (int k = 0; k < kSteps; ++k) {
      at::Tensor g = (torch::randn({kNumel}, cuda) * (0.1 + k) * 4.0).to(torch::kBFloat16);
      adam_step(ref, g.to(torch::kFloat, false, /*copy=*/true), ref_state, c, lr_at(k), std::nullopt, scale);
      adam_step_mixed(mine, g, state, c, lr_at(k), std::nullopt, scale, at::Tensor());
    }
    EXPECT_LE(((mine - ref).abs().max() / ref.abs().max().clamp_min(1.0)).item<double>(), kTol)
        << (decoupled ? "AdamW" : "Adam-L2");
  }
}

TEST(AdamMixed, UnavailableOnTheHostIsAClearError) {
  EXPECT_FALSE(mixed_adam_available(c10::Device(c10::kCPU)));
  const auto c = make_config(config::OptimizerType::AdamW, true, 0.0);
  at::Tensor p = torch::zeros({8});
  AdamState state = make_adam_state(p);
  try {
    adam_step_mixed(p, torch::zeros({8}, torch::kBFloat16), state, c, 1e-3, std::nullopt, at::Tensor(), at::Tensor());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam_step_mixed"), std::string::npos) << e.what();
  }
}
