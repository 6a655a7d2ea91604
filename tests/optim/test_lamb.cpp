// Lamb (optim/lamb.h on ATen, optim/cpu_lamb.h on the host) against a
// reference written here from the LAMB paper (You et al. 2019, Algorithm 2)
// and DeepSpeed's FusedLamb: plain per-parameter ATen ops in double on the
// unflattened tensors. Several parameters (one of zero norm, one whose trust
// ratio hits max_coeff, one that hits min_coeff) live in one flat buffer with
// padding between them, and that buffer is cut into segments across parameter
// boundaries as ZeRO's ranks hold it: each segment's partial norms are summed
// (the all-reduce) before the update. 12 steps with a changing lr, with and
// without weight decay and bias correction, a grad scale and a cycled beta1.
// Tolerance: max |ours - reference| / max |reference| <= 2e-6 (fp32 against double).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "../common/error_of.h"
#include "../common/forced_isa.h"
#include "../common/lamb_reference.h"
#include "stratum/core/error.h"
#include "stratum/optim/cpu_lamb.h"
#include "stratum/optim/host_adam.h"
#include "stratum/optim/lamb.h"

using namespace stratum;
using namespace stratum::optim;

namespace {

constexpr int kSteps = 12;
constexpr double kTol = 2e-6;
constexpr int64_t kPad = 3;  // padding elements after every parameter in the flat buffer
constexpr float kPadValue = 1234.5f;

double lr_at(int step) { return 1e-2 * (1.0 + 0.5 * std::sin(0.7 * step)); }
double beta1_at(int step) { return 0.85 + 0.005 * step; }

config::OptimizerConfig lamb_config(double weight_decay, bool bias_correction) {
  config::OptimizerConfig c;
  c.type = config::OptimizerType::Lamb;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.eps = 1e-6;
  c.weight_decay = weight_decay;
  c.bias_correction = bias_correction;
  c.max_coeff = 10.0;
  c.min_coeff = 0.01;
  return c;
}

using Reference = test::LambReference;

// --- the parameters and their flat layout ------------------------------------
struct Problem {
  std::vector<at::Tensor> init;                 // unflattened, fp32
  std::vector<std::vector<at::Tensor>> grads;   // per step, per parameter
  std::vector<int64_t> offsets;                 // in the flat buffer
  int64_t flat_numel = 0;
};

Problem make_problem() {
  torch::manual_seed(5);
  Problem pr;
  pr.init = {
      torch::randn({7, 5}),           // ordinary
      torch::zeros({6}),              // ||p|| = 0 at the start: r = 1
      torch::randn({3, 4}) * 300.0,   // large weights, small update: r clamped to max_coeff
      torch::randn({9}) * 1e-5,       // tiny weights: r clamped to min_coeff
      torch::randn({4099}),           // long: vector bodies and tails
      torch::randn({1}),
  };
  for (const auto& t : pr.init) {
    pr.offsets.push_back(pr.flat_numel);
    pr.flat_numel += t.numel() + kPad;
  }
  for (int k = 0; k < kSteps; ++k) {
    std::vector<at::Tensor> g;
    for (const auto& t : pr.init) g.push_back(torch::randn(t.sizes()) * (0.1 + 0.2 * k));
    pr.grads.push_back(g);
  }
  return pr;
}

at::Tensor flatten(const Problem& pr, const std::vector<at::Tensor>& parts, float pad) {
  at::Tensor flat = torch::full({pr.flat_numel}, pad);
  for (size_t i = 0; i < parts.size(); ++i) flat.narrow(0, pr.offsets[i], parts[i].numel()).copy_(parts[i].reshape(-1));
  return flat;
}

// Segments [cut_k, cut_k+1) of the flat buffer, and the parameter runs in each (offsets into the segment).
std::vector<std::vector<ParamRun>> runs_for_cuts(const Problem& pr, const std::vector<int64_t>& cuts) {
  std::vector<std::vector<ParamRun>> out;
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    std::vector<ParamRun> runs;
    for (size_t i = 0; i < pr.init.size(); ++i) {
      const int64_t from = std::max(cuts[s], pr.offsets[i]), to = std::min(cuts[s + 1], pr.offsets[i] + pr.init[i].numel());
      if (from < to) runs.push_back(ParamRun{static_cast<int64_t>(i), from - cuts[s], to - from});
    }
    out.push_back(runs);
  }
  return out;
}

double max_rel(const at::Tensor& ours_flat, const Problem& pr, const Reference& ref) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < pr.init.size(); ++i) {
    const at::Tensor mine = ours_flat.narrow(0, pr.offsets[i], pr.init[i].numel()).to(torch::kDouble);
    const at::Tensor want = ref.p[i].reshape(-1);
    // Relative to each parameter's own scale (they range over 8 orders of magnitude).
    scale = want.abs().max().item<double>();
    if (scale == 0) scale = 1;
    worst = std::max(worst, (mine - want).abs().max().item<double>() / scale);
  }
  return worst;
}

// The padding of the flat buffers was neither read into a norm nor written.
void expect_padding_untouched(const Problem& pr, const at::Tensor& flat, float value, const std::string& what) {
  for (size_t i = 0; i < pr.init.size(); ++i) {
    const at::Tensor pad = flat.narrow(0, pr.offsets[i] + pr.init[i].numel(), kPad);
    EXPECT_TRUE(torch::equal(pad, torch::full({kPad}, value))) << what << ": padding after parameter " << i;
  }
}

struct Case {
  double weight_decay;
  bool bias_correction;
  double grad_scale;
  bool vary_beta1;
  std::string name() const {
    return "wd " + std::to_string(weight_decay) + (bias_correction ? " bias-corrected" : " uncorrected") +
           " grad_scale " + std::to_string(grad_scale) + (vary_beta1 ? " cycled beta1" : "");
  }
};

const Case kCases[] = {
    {0.0, true, 1.0, false}, {0.01, true, 1.0, false}, {0.01, false, 1.0, false},
    {0.0, false, 1.0, false}, {0.01, true, 4.0, true},  {0.01, false, 3.0, true},
};

// The segment cuts: whole; cut inside parameters 0, 4 and in padding; one element per segment at the ends.
const std::vector<std::vector<int64_t>> kCuts = {{0}, {0, 20, 2000}, {0, 1, 39, 40, 75}};

std::vector<int64_t> full_cuts(std::vector<int64_t> cuts, int64_t n) {
  cuts.push_back(n);
  return cuts;
}

// Runs the ATen path over the segments of `cuts` for kSteps; returns the max relative difference seen.
double run_aten(const Case& c, const std::vector<int64_t>& cuts_in, Reference* ref_out = nullptr) {
  const Problem pr = make_problem();
  const std::vector<int64_t> cuts = full_cuts(cuts_in, pr.flat_numel);
  const auto config = lamb_config(c.weight_decay, c.bias_correction);
  const auto all_runs = runs_for_cuts(pr, cuts);
  const int64_t num_params = static_cast<int64_t>(pr.init.size());

  at::Tensor flat = flatten(pr, pr.init, kPadValue);
  std::vector<at::Tensor> segs;
  std::vector<AdamState> states;
  std::vector<LambRuns> runs;
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    segs.push_back(flat.narrow(0, cuts[s], cuts[s + 1] - cuts[s]));
    states.push_back(make_adam_state(segs.back()));
    runs.emplace_back(all_runs[s], segs.back().numel(), num_params, torch::kCPU, /*max_piece=*/1000);
  }
  Reference ref(pr.init);
  double worst = 0;
  for (int k = 0; k < kSteps; ++k) {
    const double lr = lr_at(k);
    const std::optional<double> beta1 = c.vary_beta1 ? std::optional<double>(beta1_at(k)) : std::nullopt;
    // Padding gradients are NaN: reading them anywhere would show.
    const at::Tensor g = flatten(pr, pr.grads[k], NAN) * c.grad_scale;
    const at::Tensor g_before = g.clone();
    const at::Tensor scale = c.grad_scale != 1.0 ? torch::full({}, c.grad_scale) : at::Tensor();
    at::Tensor total = lamb_norms_buffer(num_params, torch::kCPU);
    for (size_t s = 0; s < segs.size(); ++s) {
      at::Tensor part = lamb_norms_buffer(num_params, torch::kCPU);  // this "rank's" partial norms
      lamb_moments(segs[s], g.narrow(0, cuts[s], segs[s].numel()), states[s], runs[s], config, beta1, scale, part);
      total += part;  // the all-reduce
    }
    const at::Tensor ratios = lamb_trust_ratios(total, config);
    for (size_t s = 0; s < segs.size(); ++s) lamb_update(segs[s], states[s], runs[s], config, lr, beta1, ratios);
    ref.apply(pr.grads[k], config, lr, beta1.value_or(config.beta1));
    EXPECT_TRUE(torch::equal(g.isnan(), g_before.isnan()) && torch::equal(g.nan_to_num(), g_before.nan_to_num()))
        << "the gradient was modified";
    for (size_t i = 0; i < pr.init.size(); ++i)
      EXPECT_NEAR(ratios[i].item<double>(), ref.last_ratios[i], 1e-5 * ref.last_ratios[i]) << "ratio of param " << i;
    worst = std::max(worst, max_rel(flat, pr, ref));
  }
  for (const auto& st : states) EXPECT_EQ(st.step.item<float>(), float(kSteps));
  expect_padding_untouched(pr, flat, kPadValue, c.name());
  for (size_t s = 0; s < segs.size(); ++s) {
    // The moments of padding stay 0.
    at::Tensor m_flat = torch::full({pr.flat_numel}, -1.0f);
    m_flat.narrow(0, cuts[s], segs[s].numel()).copy_(states[s].exp_avg);
    for (size_t i = 0; i < pr.init.size(); ++i) {
      const int64_t pad_at = pr.offsets[i] + pr.init[i].numel();
      for (int64_t e = pad_at; e < pad_at + kPad; ++e)
        if (e >= cuts[s] && e < cuts[s + 1]) EXPECT_EQ(m_flat[e].item<float>(), 0.0f) << "exp_avg in padding";
    }
  }
  if (ref_out) *ref_out = ref;
  return worst;
}

using stratum::test::ForcedIsa;
using stratum::test::runnable_isas;

// The host passes over the same segments; returns the max relative difference and the final flat params.
std::pair<double, at::Tensor> run_host(const Case& c, const std::vector<int64_t>& cuts_in, int threads,
                                       at::Tensor* bf16_out = nullptr) {
  const Problem pr = make_problem();
  const std::vector<int64_t> cuts = full_cuts(cuts_in, pr.flat_numel);
  const auto config = lamb_config(c.weight_decay, c.bias_correction);
  const auto all_runs = runs_for_cuts(pr, cuts);
  const size_t num_params = pr.init.size();

  at::Tensor flat = flatten(pr, pr.init, kPadValue);
  at::Tensor m = torch::zeros({pr.flat_numel}), v = torch::zeros({pr.flat_numel});
  at::Tensor copy16 = torch::full({pr.flat_numel}, kPadValue, torch::kBFloat16);
  Reference ref(pr.init);
  double worst = 0;
  for (int k = 0; k < kSteps; ++k) {
    const std::optional<double> beta1 = c.vary_beta1 ? std::optional<double>(beta1_at(k)) : std::nullopt;
    const at::Tensor g = flatten(pr, pr.grads[k], NAN) * c.grad_scale;
    CpuLambStep s;
    s.lr = lr_at(k);
    s.beta1 = beta1.value_or(config.beta1);
    s.beta2 = config.beta2;
    s.eps = config.eps;
    s.weight_decay = config.weight_decay;
    s.bias_correction = config.bias_correction;
    s.step = k + 1;
    s.grad_scale = c.grad_scale;
    s.num_threads = threads;
    std::vector<double> sq_p(num_params, 0.0), sq_u(num_params, 0.0);
    for (size_t seg = 0; seg + 1 < cuts.size(); ++seg) {
      const int64_t off = cuts[seg];
      cpu_lamb_moments(flat.data_ptr<float>() + off, g.data_ptr<float>() + off, m.data_ptr<float>() + off,
                       v.data_ptr<float>() + off, all_runs[seg], s, sq_p.data(), sq_u.data());
    }
    at::Tensor sq = torch::stack({torch::tensor(sq_p, torch::kDouble), torch::tensor(sq_u, torch::kDouble)});
    const at::Tensor ratios = lamb_trust_ratios(sq, config).contiguous();
    for (size_t seg = 0; seg + 1 < cuts.size(); ++seg) {
      const int64_t off = cuts[seg];
      cpu_lamb_update(flat.data_ptr<float>() + off, m.data_ptr<float>() + off, v.data_ptr<float>() + off,
                      all_runs[seg], s, ratios.data_ptr<double>(),
                      reinterpret_cast<uint16_t*>(copy16.data_ptr()) + off, Copy16::bf16);
    }
    ref.apply(pr.grads[k], config, s.lr, s.beta1);
    worst = std::max(worst, max_rel(flat, pr, ref));
  }
  expect_padding_untouched(pr, flat, kPadValue, c.name() + " (host)");
  for (size_t i = 0; i < num_params; ++i) {
    const int64_t n = pr.init[i].numel();
    EXPECT_TRUE(torch::equal(copy16.narrow(0, pr.offsets[i], n), flat.narrow(0, pr.offsets[i], n).to(torch::kBFloat16)))
        << "the bf16 copy of parameter " << i << " is the rounded update";
    EXPECT_TRUE(torch::equal(copy16.narrow(0, pr.offsets[i] + n, kPad),
                             torch::full({kPad}, kPadValue, torch::kBFloat16)))
        << "the bf16 copy's padding was written";
  }
  if (bf16_out) *bf16_out = copy16;
  return {worst, flat};
}

}  // namespace

TEST(Lamb, MatchesThePerParameterReference) {
  for (const Case& c : kCases)
    for (const auto& cuts : kCuts) {
      Reference ref({});
      const double diff = run_aten(c, cuts, &ref);
      EXPECT_LE(diff, kTol) << c.name() << ", " << cuts.size() << " segment(s)";
      std::printf("  %-48s %zu segment(s): max rel diff %.3g\n", c.name().c_str(), cuts.size(), diff);
      // The cases the reference must have gone through, or the test proves less than it says.
      EXPECT_TRUE(ref.hit_max) << "no trust ratio reached max_coeff";
      EXPECT_TRUE(ref.hit_min) << "no trust ratio reached min_coeff";
      EXPECT_TRUE(ref.hit_zero) << "no parameter of zero norm";
    }
}

TEST(Lamb, BiasCorrectionChangesTheStep) {
  // Guards the reference: the cases above would not tell the two apart if the flag were ignored.
  const Problem pr = make_problem();
  Reference on(pr.init), off(pr.init);
  on.apply(pr.grads[0], lamb_config(0.0, true), 1e-2, 0.9);
  off.apply(pr.grads[0], lamb_config(0.0, false), 1e-2, 0.9);
  on.apply(pr.grads[1], lamb_config(0.0, true), 1e-2, 0.9);
  off.apply(pr.grads[1], lamb_config(0.0, false), 1e-2, 0.9);
  EXPECT_GT((on.p[0] - off.p[0]).abs().max().item<double>(), 1e-5);
}

TEST(Lamb, HostPassesMatchTheReferenceOnEveryIsa) {
  for (const char* isa : runnable_isas()) {
    ForcedIsa forced(isa);
    for (const Case& c : kCases)
      for (const auto& cuts : kCuts) {
        const double diff = run_host(c, cuts, /*threads=*/2).first;
        EXPECT_LE(diff, kTol) << isa << " " << c.name() << ", " << cuts.size() << " segment(s)";
        std::printf("  %-6s %-48s %zu segment(s): max rel diff %.3g\n", isa, c.name().c_str(), cuts.size(), diff);
      }
  }
}

// Same fp32 operations per element and the same summation order on every path
// and any number of threads: bit for bit.
TEST(Lamb, HostResultIsTheSameOnEveryIsaAndThreadCount) {
  const Case c = kCases[4];
  at::Tensor first;
  for (const char* isa : runnable_isas()) {
    ForcedIsa forced(isa);
    for (int threads : {1, 3}) {
      at::Tensor params = run_host(c, kCuts[2], threads).second;
      if (!first.defined()) first = params;
      EXPECT_TRUE(torch::equal(params, first)) << isa << " with " << threads << " threads";
    }
  }
}

TEST(Lamb, FoundInfLeavesEverythingUntouched) {
  const auto config = lamb_config(0.01, true);
  const int64_t n = 50;
  at::Tensor p = torch::randn({n});
  AdamState state = make_adam_state(p);
  const LambRuns runs({{0, 0, 20}, {1, 25, 25}}, n, 2, torch::kCPU);
  // A first step, so that the moments are not zero.
  lamb_step(p, torch::randn({n}), state, runs, config, 1e-2, std::nullopt);
  const at::Tensor p0 = p.clone(), m0 = state.exp_avg.clone(), v0 = state.exp_avg_sq.clone();
  at::Tensor g = torch::randn({n});
  g[3] = INFINITY;
  lamb_step(p, g, state, runs, config, 1e-2, std::nullopt, at::Tensor(), nullptr, torch::ones({1}));
  EXPECT_TRUE(torch::equal(p, p0));
  EXPECT_TRUE(torch::equal(state.exp_avg, m0));
  EXPECT_TRUE(torch::equal(state.exp_avg_sq, v0));
  EXPECT_EQ(state.step.item<float>(), 1.0f);
  // found_inf 0: the same as none.
  at::Tensor q = p.clone();
  AdamState q_state{state.exp_avg.clone(), state.exp_avg_sq.clone(), state.step.clone()};
  const at::Tensor g2 = torch::randn({n});
  lamb_step(p, g2, state, runs, config, 1e-2, std::nullopt, at::Tensor(), nullptr, torch::zeros({1}));
  lamb_step(q, g2, q_state, runs, config, 1e-2, std::nullopt);
  EXPECT_TRUE(torch::equal(p, q));
  EXPECT_EQ(state.step.item<float>(), 2.0f);
}

TEST(Lamb, WritesTheRoundedCopyOfTheRuns) {
  const auto config = lamb_config(0.01, true);
  const int64_t n = 40;
  at::Tensor p = torch::randn({n});
  AdamState state = make_adam_state(p);
  const LambRuns runs({{0, 2, 10}, {1, 15, 20}}, n, 2, torch::kCPU);
  at::Tensor copy = torch::full({n}, 7.0, torch::kBFloat16);
  at::Tensor sq = lamb_norms_buffer(2, torch::kCPU);
  lamb_moments(p, torch::randn({n}).to(torch::kBFloat16), state, runs, config, std::nullopt, at::Tensor(), sq);
  lamb_update(p, state, runs, config, 1e-2, std::nullopt, lamb_trust_ratios(sq, config), copy);
  EXPECT_TRUE(torch::equal(copy.narrow(0, 2, 10), p.narrow(0, 2, 10).to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(copy.narrow(0, 15, 20), p.narrow(0, 15, 20).to(torch::kBFloat16)));
  EXPECT_EQ(copy[0].item<float>(), 7.0f);
  EXPECT_EQ(copy[12].item<float>(), 7.0f);
  EXPECT_EQ(copy[39].item<float>(), 7.0f);
}

// HostAdam's Lamb passes (what the engine calls with offload) against the ATen
// path on one segment with padding; gradients in bf16 on the host.
TEST(Lamb, HostAdamMatchesTheDevicePath) {
  const auto config = lamb_config(0.01, true);
  const Problem pr = make_problem();
  const auto runs = runs_for_cuts(pr, {0, pr.flat_numel})[0];
  const int64_t num_params = static_cast<int64_t>(pr.init.size());
  at::Tensor ref = flatten(pr, pr.init, 0.0f), host = ref.clone();
  AdamState ref_state = make_adam_state(ref), host_state = make_adam_state(host);
  const LambRuns lamb_runs(runs, pr.flat_numel, num_params, torch::kCPU);
  HostAdam opt(config, 0.5);
  at::Tensor params16 = torch::zeros({pr.flat_numel}, torch::kBFloat16);
  for (int k = 0; k < 4; ++k) {
    const at::Tensor g = flatten(pr, pr.grads[k], 0.0f).mul(2.0).to(torch::kBFloat16);
    lamb_step(ref, g, ref_state, lamb_runs, config, lr_at(k), std::nullopt, torch::full({}, 2.0));
    at::Tensor sq = torch::zeros({2, num_params}, torch::kDouble);
    opt.lamb_moments(host, g, host_state, runs, std::nullopt, 2.0, sq.data_ptr<double>(),
                     sq.data_ptr<double>() + num_params);
    const at::Tensor ratios = lamb_trust_ratios(sq, config).contiguous();
    opt.lamb_update(host, params16, host_state, runs, lr_at(k), std::nullopt, ratios.data_ptr<double>());
  }
  EXPECT_EQ(host_state.step.item<float>(), 4.0f);
  const double diff = ((host - ref).abs().max() / ref.abs().max()).item<double>();
  EXPECT_LE(diff, 2e-6);
  std::printf("  HostAdam Lamb vs lamb_step: max rel diff %.3g\n", diff);
  for (size_t i = 0; i < pr.init.size(); ++i) {
    const int64_t n = pr.init[i].numel();
    EXPECT_TRUE(torch::equal(params16.narrow(0, pr.offsets[i], n), host.narrow(0, pr.offsets[i], n).to(torch::kBFloat16)));
  }
}

TEST(Lamb, ChunkedCopiesFromAGpuMatch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const auto config = lamb_config(0.01, false);
  const Problem pr = make_problem();
  const auto runs = runs_for_cuts(pr, {0, pr.flat_numel})[0];
  const int64_t num_params = static_cast<int64_t>(pr.init.size());
  for (int64_t chunk : {int64_t{37}, int64_t{1000}, int64_t{1} << 24}) {
    at::Tensor ref = flatten(pr, pr.init, 0.0f), host = ref.clone();
    AdamState ref_state = make_adam_state(ref), host_state = make_adam_state(host);
    const LambRuns lamb_runs(runs, pr.flat_numel, num_params, torch::kCPU);
    HostAdam opt(config, 0.5, 1, chunk);
    for (int k = 0; k < 3; ++k) {
      const at::Tensor g = flatten(pr, pr.grads[k], 0.0f);
      lamb_step(ref, g, ref_state, lamb_runs, config, lr_at(k), std::nullopt);
      at::Tensor sq = torch::zeros({2, num_params}, torch::kDouble);
      opt.lamb_moments(host, g.to(torch::kCUDA), host_state, runs, std::nullopt, 1.0, sq.data_ptr<double>(),
                       sq.data_ptr<double>() + num_params);
      const at::Tensor ratios = lamb_trust_ratios(sq, config).contiguous();
      opt.lamb_update(host, at::Tensor(), host_state, runs, lr_at(k), std::nullopt, ratios.data_ptr<double>());
    }
    EXPECT_LE(((host - ref).abs().max() / ref.abs().max()).item<double>(), 2e-6) << "chunk " << chunk;
  }
}

// The ATen path on a GPU against the same path on the CPU (same ops, the GPU's reductions).
TEST(Lamb, OnAGpuMatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const auto config = lamb_config(0.01, true);
  const Problem pr = make_problem();
  const auto runs = runs_for_cuts(pr, {0, pr.flat_numel})[0];
  const int64_t num_params = static_cast<int64_t>(pr.init.size());
  at::Tensor cpu = flatten(pr, pr.init, 0.0f), gpu = cpu.to(torch::kCUDA);
  AdamState cpu_state = make_adam_state(cpu), gpu_state = make_adam_state(gpu);
  const LambRuns cpu_runs(runs, pr.flat_numel, num_params, torch::kCPU),
      gpu_runs(runs, pr.flat_numel, num_params, torch::kCUDA);
  at::Tensor params16 = torch::zeros({pr.flat_numel}, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
  for (int k = 0; k < kSteps; ++k) {
    const at::Tensor g = flatten(pr, pr.grads[k], 0.0f).mul(4.0);
    lamb_step(cpu, g, cpu_state, cpu_runs, config, lr_at(k), std::nullopt, torch::full({}, 4.0));
    at::Tensor sq = lamb_norms_buffer(num_params, torch::kCUDA);
    lamb_moments(gpu, g.to(torch::kCUDA), gpu_state, gpu_runs, config, std::nullopt,
                 torch::full({}, 4.0, torch::TensorOptions().device(torch::kCUDA)), sq);
    lamb_update(gpu, gpu_state, gpu_runs, config, lr_at(k), std::nullopt, lamb_trust_ratios(sq, config), params16);
  }
  EXPECT_LE(((gpu.cpu() - cpu).abs().max() / cpu.abs().max()).item<double>(), 1e-5);
  EXPECT_TRUE(torch::equal(params16, gpu.to(torch::kBFloat16)));
}

TEST(Lamb, TrustRatioRules) {
  auto config = lamb_config(0.0, true);
  config.max_coeff = 5.0;
  config.min_coeff = 0.5;
  // ||p||^2, ||u||^2 per parameter: ordinary, clamped high, clamped low, ||p|| = 0, ||u|| = 0.
  const at::Tensor sq = torch::tensor({{4.0, 100.0, 1.0, 0.0, 9.0}, {1.0, 1.0, 100.0, 4.0, 0.0}});
  const at::Tensor r = lamb_trust_ratios(sq, config);
  const std::vector<double> want = {2.0, 5.0, 0.5, 1.0, 1.0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(r[i].item<double>(), want[i]) << i;
}

TEST(Lamb, BadRunsAndTensorsAreNamed) {
  auto expect_error = [](auto&& call, const std::string& words) {
    const std::string e = stratum::test::error_of(call);
    EXPECT_NE(e.find(words), std::string::npos) << "wanted an error saying '" << words << "', got: '" << e << "'";
  };
  expect_error([] { LambRuns({{0, 5, 10}}, 12, 1, torch::kCPU); }, "run 0");
  expect_error([] { LambRuns({{0, 0, 5}, {1, 4, 2}}, 12, 2, torch::kCPU); }, "overlaps");
  expect_error([] { LambRuns({{3, 0, 5}}, 12, 2, torch::kCPU); }, "names no parameter");
  const auto config = lamb_config(0.0, true);
  at::Tensor p = torch::zeros({12});
  AdamState state = make_adam_state(p);
  const LambRuns runs({{0, 0, 5}}, 12, 1, torch::kCPU);
  at::Tensor sq = lamb_norms_buffer(1, torch::kCPU);
  expect_error([&] { lamb_moments(p, torch::zeros({11}), state, runs, config, std::nullopt, at::Tensor(), sq); },
               "grads must be");
  at::Tensor wrong_sq = lamb_norms_buffer(2, torch::kCPU);
  expect_error([&] { lamb_moments(p, torch::zeros({12}), state, runs, config, std::nullopt, at::Tensor(), wrong_sq); },
               "sq_norms must be");
  at::Tensor q = torch::zeros({13});
  expect_error([&] { lamb_update(q, state, runs, config, 1e-3, std::nullopt, torch::ones({1})); }, "13");
  std::vector<double> s1(1), s2(1);
  const float x = 0;
  float y = 0;
  const std::vector<ParamRun> empty_run = {ParamRun{0, 0, 0}};
  expect_error([&] { cpu_lamb_moments(&x, &x, &y, &y, empty_run, CpuLambStep{}, s1.data(), s2.data()); }, "run 0");
}
