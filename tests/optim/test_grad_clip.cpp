// Global-norm clipping against torch::nn::utils::clip_grad_norm_ on one rank,
// with the norm assembled from shards as the engine does across ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "stratum/optim/adam.h"
#include "stratum/optim/grad_clip.h"

using namespace stratum;
using namespace stratum::optim;

TEST(GradClip, CoefficientFormula) {
  EXPECT_DOUBLE_EQ(clip_coefficient(2.0, 1.0), 1.0 / (2.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip_coefficient(10.0, 0.5), 0.5 / (10.0 + 1e-6));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);  // below the limit: unchanged
  EXPECT_DOUBLE_EQ(clip_coefficient(1.0, 1.0), 1.0 / (1.0 + 1e-6));  // at the limit: just below 1
  EXPECT_EQ(clip_coefficient(100.0, 0.0), 1.0);  // gradient_clipping 0: off
  EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(std::nan(""), 1.0), 1.0);
}

// A bucket's norm does not depend on how the gradients are bucketed: on a CPU
// the squares are summed in double, so a million-element bucket whole and in
// 7 uneven pieces give the double-precision norm within fp32's rounding (an
// fp32 lane-by-lane sum drifts by parts in a million at this size, which
// showed as expert- and pipeline-parallel norms 1e-5 off one process's).
TEST(GradClip, CpuNormOfALargeBucketIsItsDoublePrecisionNormWhateverTheSplit) {
  torch::manual_seed(1);
  const at::Tensor g = torch::rand({1 << 20}) + 0.5;  // all of one sign: rounding errors add up
  const double exact = std::sqrt(g.to(at::kDouble).square().sum().item<double>());
  EXPECT_NEAR(l2_norm(g).item<double>(), exact, 1e-7 * exact);
  EXPECT_EQ(l2_norm(g).scalar_type(), at::kFloat);
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& p : g.tensor_split({1, 1000, 70001, 300000, 300001, 777777})) pieces.push_back(p);
  EXPECT_NEAR(std::sqrt(squared_norm(pieces).item<double>()), exact, 1e-7 * exact);
  at::Tensor out = at::empty({}, at::kFloat);
  l2_norm_out(out, g.to(at::kBFloat16));
  EXPECT_NEAR(out.item<double>(), std::sqrt(g.to(at::kBFloat16).to(at::kDouble).square().sum().item<double>()),
              1e-7 * exact);
}

TEST(GradClip, NormFromShardsAndClippedGradsMatchClipGradNorm) {
  torch::manual_seed(0);
  const double max_norm = 1.0;
  std::vector<at::Tensor> params = {torch::randn({300, 7}), torch::randn({1001}), torch::randn({5})};
  std::vector<at::Tensor> grads;
  for (auto& p : params) {
    p.requires_grad_(true);
    grads.push_back(torch::randn(p.sizes()) * 3.0);
    p.mutable_grad() = grads.back().clone();
  }

  // The engine's view: one flat buffer split over 4 "ranks", squared norms summed.
  std::vector<at::Tensor> flat_pieces;
  for (const auto& g : grads) flat_pieces.push_back(g.reshape({-1}));
  const at::Tensor flat = torch::cat(flat_pieces);
  double squared = 0.0;
  for (const at::Tensor& shard : flat.tensor_split(4)) squared += squared_norm({shard}).item<double>();
  const double total_norm = std::sqrt(squared);

  const double reference_norm = torch::nn::utils::clip_grad_norm_(params, max_norm);
  EXPECT_NEAR(total_norm, reference_norm, 1e-6 * reference_norm);
  EXPECT_NEAR(std::sqrt(squared_norm(grads).item<double>()), reference_norm, 1e-6 * reference_norm);
  EXPECT_GT(total_norm, max_norm);

  const double coef = clip_coefficient(total_norm, max_norm);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_LE((grads[i] * coef - params[i].grad()).abs().max().item<double>(), 1e-7);
}

// The clipped update: adam_step with grad_scale = 1 / coef equals torch's
// AdamW after clip_grad_norm_.
TEST(GradClip, ClippedUpdateMatchesTorch) {
  torch::manual_seed(1);
  const double max_norm = 0.5;
  config::OptimizerConfig c;
  c.weight_decay = 0.01;
  const at::Tensor init = torch::randn({2048});
  at::Tensor ours = init.clone();
  AdamState state = make_adam_state(ours);
  at::Tensor theirs = init.clone().requires_grad_(true);
  torch::optim::AdamW reference({theirs}, torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(
                                              c.weight_decay));
  for (int k = 0; k < 10; ++k) {
    const at::Tensor g = torch::randn({2048}) * (k + 1);
    const double coef = clip_coefficient(std::sqrt(squared_norm({g}).item<double>()), max_norm);
    adam_step(ours, g.clone(), state, c, c.lr, std::nullopt, 1.0 / coef);
    theirs.mutable_grad() = g.clone();
    torch::nn::utils::clip_grad_norm_({theirs}, max_norm);
    reference.step();
  }
  EXPECT_LE((ours - theirs.detach()).abs().max().item<double>(), 1e-6);
}

// fp16 grads under a loss scale: the fp32-accumulated norm divided by the scale
// is the norm of the unscaled grads.
TEST(GradClip, HalfGradsAccumulateInFp32) {
  torch::manual_seed(2);
  const at::Tensor g = torch::randn({100000});
  const double scale = 1024.0;
  const at::Tensor scaled_half = (g * scale).to(torch::kHalf);  // squares would overflow fp16
  const at::Tensor sq = squared_norm({scaled_half});
  EXPECT_EQ(sq.scalar_type(), at::kFloat);
  EXPECT_EQ(sq.dim(), 0);
  EXPECT_NEAR(std::sqrt(sq.item<double>()) / scale, g.norm().item<double>(), 1e-3 * g.norm().item<double>());
  EXPECT_EQ(squared_norm({}).item<float>(), 0.0f);
}

// The engine's fp16 recipe from grad_clip.h: norm of the scaled grads / loss
// scale, then one kernel pass with grad_scale = loss_scale / coef, equals
// clipping the unscaled grads and stepping.
TEST(GradClip, UnscaleAndClipFoldedIntoTheKernel) {
  torch::manual_seed(3);
  const double loss_scale = 65536.0, max_norm = 1.0;
  config::OptimizerConfig c;
  const at::Tensor init = torch::randn({4096});
  at::Tensor ours = init.clone();
  AdamState state = make_adam_state(ours);
  at::Tensor theirs = init.clone().requires_grad_(true);
  torch::optim::AdamW reference({theirs}, torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(
                                              c.weight_decay));
  for (int k = 0; k < 10; ++k) {
    const at::Tensor g = torch::randn({4096}) * 0.1 * (k + 1);  // norm ~6.4 (k + 1): always clipped
    at::Tensor scaled = g * loss_scale;
    const double total_norm = std::sqrt(squared_norm({scaled}).item<double>()) / loss_scale;
    const double coef = clip_coefficient(total_norm, max_norm);
    adam_step(ours, scaled, state, c, c.lr, std::nullopt, loss_scale / coef);
    theirs.mutable_grad() = g.clone();
    torch::nn::utils::clip_grad_norm_({theirs}, max_norm);
    reference.step();
  }
  EXPECT_LE((ours - theirs.detach()).abs().max().item<double>(), 1e-6);
}

// The device version (no host sync in the engine's step) equals the host one.
TEST(GradClip, TensorCoefficientEqualsTheHostOne) {
  for (double norm : {0.0, 0.3, 1.0, 7.5, std::numeric_limits<double>::infinity(), std::nan("")})
    for (double max_norm : {0.0, 1.0, 5.0}) {
      const at::Tensor t = optim::clip_coefficient(torch::full({}, norm, torch::kFloat), max_norm);
      EXPECT_NEAR(t.item<double>(), optim::clip_coefficient(norm, max_norm), 1e-6) << norm << " " << max_norm;
    }
}
