// cpu_adam_step against torch::optim::Adam / AdamW over 20 steps with a changing
// lr, on every ISA path this CPU can run, at sizes with vector tails (1, 7, 1000,
// 65537). Tolerance: max abs difference <= 1e-6 on params of order 1 (both fp32;
// they differ only in rounding). The paths agree with each other within 4 ulp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cstdlib>

#include <torch/torch.h>

#include "../common/forced_isa.h"
#include "stratum/core/error.h"
#include "stratum/optim/cpu_adam.h"

using namespace stratum;
using namespace stratum::optim;

namespace {

constexpr double kTol = 1e-6;
constexpr int kSteps = 20;
const int64_t kSizes[] = {1, 7, 1000, 65537};

double lr_at(int step) { return 1e-2 * (1.0 + 0.5 * std::sin(0.7 * step)); }

using stratum::test::ForcedIsa;
using stratum::test::runnable_isas;

struct Case {
  bool decoupled;
  double weight_decay, grad_scale;
};

CpuAdamStep make_step(const Case& c, int k) {
  CpuAdamStep s;
  s.lr = lr_at(k);
  s.beta1 = 0.9;
  s.beta2 = 0.98;
  s.eps = 1e-7;
  s.weight_decay = c.weight_decay;
  s.decoupled = c.decoupled;
  s.step = k + 1;
  s.grad_scale = c.grad_scale;
  return s;
}

// Our params after kSteps (forced to `isa`), and the max abs difference from torch seen after any step.
std::pair<at::Tensor, double> run_against_torch(const Case& c, int64_t n, const char* isa) {
  torch::manual_seed(n);
  const at::Tensor init = torch::randn({n});
  std::vector<at::Tensor> grads;
  for (int k = 0; k < kSteps; ++k) grads.push_back(torch::randn({n}) * (0.1 + k));

  ForcedIsa forced(isa);
  at::Tensor ours = init.clone(), m = torch::zeros({n}), v = torch::zeros({n});
  at::Tensor theirs = init.clone().requires_grad_(true);
  std::unique_ptr<torch::optim::Optimizer> reference;
  if (c.decoupled)
    reference = std::make_unique<torch::optim::AdamW>(
        std::vector<at::Tensor>{theirs}, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.98}).eps(1e-7).weight_decay(c.weight_decay));
  else
    reference = std::make_unique<torch::optim::Adam>(
        std::vector<at::Tensor>{theirs}, torch::optim::AdamOptions(1e-2).betas({0.9, 0.98}).eps(1e-7).weight_decay(c.weight_decay));

  double worst = 0.0;
  for (int k = 0; k < kSteps; ++k) {
    const CpuAdamStep s = make_step(c, k);
    cpu_adam_step(ours, grads[k] * c.grad_scale, m, v, s);
    reference->param_groups()[0].options().set_lr(s.lr);
    theirs.mutable_grad() = grads[k].clone();
    reference->step();
    worst = std::max(worst, (ours - theirs.detach()).abs().max().item<double>());
  }
  EXPECT_GT((ours - init).abs().max().item<double>(), 1e-3) << "it did not move";
  return {ours, worst};
}

// Largest distance in units in the last place between two fp32 tensors.
int64_t max_ulp(const at::Tensor& a, const at::Tensor& b) {
  const auto ia = a.view(torch::kInt32).to(torch::kInt64), ib = b.view(torch::kInt32).to(torch::kInt64);
  // Map the sign-magnitude bit patterns onto a monotone integer line.
  auto ordered = [](const at::Tensor& i) { return torch::where(i < 0, -(i & 0x7FFFFFFF), i); };
  return (ordered(ia) - ordered(ib)).abs().max().item<int64_t>();
}

void check_case(const Case& c) {
  for (int64_t n : kSizes) {
    at::Tensor first;
    for (const char* isa : runnable_isas()) {
      auto [params, diff] = run_against_torch(c, n, isa);
      EXPECT_LE(diff, kTol) << isa << " n=" << n;
      std::printf("  %-6s n=%-6lld max |ours - torch| = %.3g\n", isa, static_cast<long long>(n), diff);
      if (!first.defined())
        first = params;
      else {
        const int64_t ulp = max_ulp(first, params);
        EXPECT_LE(ulp, 4) << isa << " vs scalar, n=" << n;
        std::printf("  %-6s n=%-6lld %lld ulp from scalar\n", isa, static_cast<long long>(n), static_cast<long long>(ulp));
      }
    }
  }
}

}  // namespace

TEST(CpuAdam, AdamWMatchesTorch) { check_case({true, 0.0, 1.0}); }
TEST(CpuAdam, AdamWWithWeightDecayMatchesTorch) { check_case({true, 0.1, 1.0}); }
TEST(CpuAdam, AdamL2MatchesTorch) { check_case({false, 0.1, 1.0}); }
TEST(CpuAdam, AdamWithoutWeightDecayMatchesTorch) { check_case({false, 0.0, 1.0}); }
TEST(CpuAdam, GradScaleUnscales) {
  check_case({true, 0.1, 1024.0});
  check_case({false, 0.1, 3.0});
}

// Against a double-precision reference fp32 drifts further than against
// torch's fp32 (20 steps of rounding; torch's own fp32 Adam-L2 is 1.7e-5 off it
// on the 65537-element case): max abs difference <= 1e-5 on params up to ~4.5.
// Ignoring the flag would be off by ~1e-2 (the first steps' 1 / (1 - b1^t)).
constexpr double kDoubleReferenceTol = 1e-5;

// bias_correction false (DeepSpeed's CPUAdam with bias_correction False) on
// every ISA path against the update written here in double:
// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p -= lr m / (sqrt(v) + eps),
// after p *= 1 - lr wd (decoupled) or g += wd p (L2).
TEST(CpuAdam, WithoutBiasCorrectionMatchesTheUncorrectedUpdate) {
  for (const char* isa : runnable_isas()) {
    ForcedIsa forced(isa);
    for (const Case& c : {Case{true, 0.1, 1.0}, Case{false, 0.1, 4.0}, Case{true, 0.0, 2.0}})
      for (int64_t n : kSizes) {
        torch::manual_seed(n + 3);
        const at::Tensor init = torch::randn({n});
        at::Tensor ours = init.clone(), m = torch::zeros({n}), v = torch::zeros({n});
        at::Tensor p = init.to(torch::kDouble), rm = torch::zeros_like(p), rv = torch::zeros_like(p);
        double worst = 0.0;
        for (int k = 0; k < kSteps; ++k) {
          const at::Tensor grad = torch::randn({n}) * (0.1 + k);
          CpuAdamStep s = make_step(c, k);
          s.bias_correction = false;
          cpu_adam_step(ours, grad * c.grad_scale, m, v, s);
          at::Tensor g = grad.to(torch::kDouble);
          if (c.decoupled) p = p * (1 - s.lr * c.weight_decay);
          else g = g + c.weight_decay * p;
          rm = s.beta1 * rm + (1 - s.beta1) * g;
          rv = s.beta2 * rv + (1 - s.beta2) * g * g;
          p = p - s.lr * rm / (rv.sqrt() + s.eps);
          worst = std::max(worst, (ours.to(torch::kDouble) - p).abs().max().item<double>());
        }
        EXPECT_LE(worst, kDoubleReferenceTol) << isa << " n=" << n << (c.decoupled ? " AdamW" : " Adam-L2");
        std::printf("  %-6s n=%-6lld %s: max |ours - reference| = %.3g\n", isa, static_cast<long long>(n),
                    c.decoupled ? "AdamW  " : "Adam-L2", worst);
      }
  }
}

// Many blocks over several threads: the same as one thread, bit for bit.
TEST(CpuAdam, ThreadsDoNotChangeTheResult) {
  const int64_t n = 5 * 65536 + 123;
  torch::manual_seed(7);
  const at::Tensor p0 = torch::randn({n}), g = torch::randn({n});
  at::Tensor p1 = p0.clone(), m1 = torch::zeros({n}), v1 = torch::zeros({n});
  at::Tensor p2 = p0.clone(), m2 = torch::zeros({n}), v2 = torch::zeros({n});
  CpuAdamStep s;
  s.num_threads = 1;
  cpu_adam_step(p1, g, m1, v1, s);
  s.num_threads = 64;  // more than the machine has: capped
  cpu_adam_step(p2, g, m2, v2, s);
  EXPECT_TRUE(torch::equal(p1, p2));
  EXPECT_TRUE(torch::equal(v1, v2));
}

// The 16-bit copy equals torch's .to(bf16 / fp16) of the updated params.
TEST(CpuAdam, SixteenBitCopyEqualsTorchRounding) {
  for (const char* isa : runnable_isas()) {
    ForcedIsa forced(isa);
    for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
      for (int64_t n : kSizes) {
        torch::manual_seed(11);
        at::Tensor p = torch::randn({n}) * 100, m = torch::zeros({n}), v = torch::zeros({n});
        at::Tensor copy = torch::zeros({n}, dtype);
        cpu_adam_step(p, torch::randn({n}), m, v, CpuAdamStep{}, copy);
        EXPECT_TRUE(torch::equal(copy, p.to(dtype))) << isa << " " << dtype << " n=" << n;
      }
      // Ties round to even, -0 stays, overflow to inf, NaN stays NaN, inf stays.
      at::Tensor p = torch::tensor({1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                                    3.0e38f, 7.0e4f, -0.0f, NAN, INFINITY}),
                 zeros = torch::zeros({9}), m = torch::zeros({9}), v = torch::zeros({9});
      at::Tensor copy = torch::zeros({9}, dtype);
      cpu_adam_step(p, zeros, m, v, CpuAdamStep{}, copy);  // zero grads: params unchanged
      const at::Tensor want = p.to(dtype);
      EXPECT_TRUE(torch::equal(copy.narrow(0, 0, 7), want.narrow(0, 0, 7))) << isa << " " << dtype;
      EXPECT_TRUE(copy[7].isnan().item<bool>()) << isa << " " << dtype;
      EXPECT_EQ(copy[8].item<float>(), INFINITY) << isa << " " << dtype;
    }
  }
}

TEST(CpuAdam, ChoosesAndForcesIsa) {
  unsetenv("STRATUM_CPU_ADAM_ISA");
  EXPECT_STREQ(isa_name(cpu_adam_isa()), runnable_isas().back());
  for (const char* isa : runnable_isas()) {
    ForcedIsa forced(isa);
    EXPECT_STREQ(isa_name(cpu_adam_isa()), isa);
  }
  const auto runnable = runnable_isas();
  for (const char* isa : {"avx2", "avx512"}) {
    if (std::find_if(runnable.begin(), runnable.end(), [&](const char* r) { return !std::strcmp(r, isa); }) !=
        runnable.end())
      continue;
    ForcedIsa forced(isa);
    EXPECT_THROW(cpu_adam_isa(), Error) << isa << " is not supported here, yet no error";
  }
  {
    ForcedIsa forced("sse9");
    try {
      cpu_adam_isa();
      ADD_FAILURE() << "no error for an unknown ISA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sse9"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(cpu_adam_threads(0.0), 1);
  EXPECT_EQ(cpu_adam_threads(1.0), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(cpu_adam_threads(100.0), cpu_adam_threads(1.0));
  // Ranks sharing the host split it.
  const int all = cpu_adam_threads(1.0);
  EXPECT_EQ(cpu_adam_threads(1.0, 2), std::max(1, all / 2));
  EXPECT_EQ(cpu_adam_threads(1.0, 1000), 1);
}

TEST(CpuAdam, RejectsBadTensors) {
  at::Tensor p = torch::zeros({8}), m = torch::zeros({8}), v = torch::zeros({8});
  auto expect_error = [](auto&& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "no error; wanted one saying: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error([&] { cpu_adam_step(p, torch::zeros({7}), m, v, {}); }, "grads has 7 elements");
  expect_error([&] { cpu_adam_step(p, torch::zeros({8}, torch::kHalf), m, v, {}); }, "grads is Half");
  at::Tensor half = torch::zeros({8}, torch::kHalf);
  expect_error([&] { cpu_adam_step(half, torch::zeros({8}), m, v, {}); }, "params is Half");
  at::Tensor strided = torch::zeros({16}).slice(0, 0, 16, 2);
  expect_error([&] { cpu_adam_step(p, torch::zeros({8}), strided, v, {}); }, "exp_avg is not contiguous");
  at::Tensor undefined;
  expect_error([&] { cpu_adam_step(p, torch::zeros({8}), m, undefined, {}); }, "exp_avg_sq is undefined");
  expect_error([&] { cpu_adam_step(p, torch::zeros({8}), m, v, {}, torch::zeros({8})); }, "params_16bit is Float");
  expect_error([&] { cpu_adam_step(p, torch::zeros({8}), m, v, {}, torch::zeros({9}, torch::kHalf)); },
               "params_16bit has 9 elements");
  CpuAdamStep zero_step;
  zero_step.step = 0;
  expect_error([&] { cpu_adam_step(p, torch::zeros({8}), m, v, zero_step); }, "1-based");
}
