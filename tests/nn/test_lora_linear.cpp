// LoRA linear against its dense equivalent: W + scale·B·A in fp32 (peft's
// merge), forward and both trainable gradients within 1e-6; the NF4 base
// against its dequantized weight; dropout on the adapter's input alone;
// layers side by side in stacked GEMMs against each layer apart.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "stratum/nn/lora_linear.h"
#include "stratum/quant/nf4.h"

namespace {

using stratum::nn::FrozenWeight;

double rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

struct Grads {
  at::Tensor y, dx, da, db;
};

// The layer, or (merged) the dense equivalent, on the same input and output gradient.
Grads run(const FrozenWeight& base, const at::Tensor& a0, const at::Tensor& b0, double scale, bool merged) {
  torch::manual_seed(5);
  at::Tensor x = torch::randn({3, 5, base.in_features()}).requires_grad_(true);
  at::Tensor a = a0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  const at::Tensor bias = torch::randn({base.out_features()});
  at::Tensor y = merged ? at::matmul(x, (base.materialize(at::kFloat, c10::kCPU) + at::matmul(b, a) * scale).t()) + bias
                        : stratum::nn::lora_linear(x, base, bias, a, b, scale, 0.0, true);
  const at::Tensor g = torch::randn(y.sizes());
  y.backward(g);
  return {y.detach(), x.grad(), a.grad(), b.grad()};
}

}  // namespace

TEST(LoraLinear, MatchesTheMergedDenseWeightFp32) {
  torch::manual_seed(1);
  const at::Tensor w = torch::randn({24, 40}) * 0.1;
  const at::Tensor a = torch::randn({8, 40}) * 0.1, b = torch::randn({24, 8}) * 0.1;  // B nonzero: a trained adapter
  FrozenWeight base;
  base.dense = w;
  for (const bool rslora : {false, true}) {
    const double scale = stratum::nn::lora_scale(8, 16, rslora);
    EXPECT_DOUBLE_EQ(scale, rslora ? 16 / std::sqrt(8.0) : 2.0);
    const Grads lora = run(base, a, b, scale, false), dense = run(base, a, b, scale, true);
    EXPECT_LE(rel(lora.y, dense.y), 1e-6);
    EXPECT_LE(rel(lora.dx, dense.dx), 1e-6);
    EXPECT_LE(rel(lora.da, dense.da), 1e-6);
    EXPECT_LE(rel(lora.db, dense.db), 1e-6);
  }
  EXPECT_FALSE(w.requires_grad());
}

// An NF4 base: the layer equals the dense layer over the dequantized weight,
// and its input gradient reads the 4-bit weight again (nothing whole saved).
TEST(LoraLinear, Nf4BaseMatchesItsDequantizedWeight) {
  torch::manual_seed(2);
  const at::Tensor w = torch::randn({32, 64}).to(at::kBFloat16);
  FrozenWeight nf4;
  nf4.nf4 = std::make_shared<stratum::quant::Nf4Tensor>(stratum::quant::quantize_nf4(w));
  FrozenWeight dense;
  dense.dense = stratum::quant::dequantize_nf4(*nf4.nf4).to(at::kFloat);
  const at::Tensor a = torch::randn({4, 64}) * 0.1, b = torch::randn({32, 4}) * 0.1;
  const Grads q = run(nf4, a, b, 2.0, false), d = run(dense, a, b, 2.0, false);
  EXPECT_LE(rel(q.y, d.y), 1e-6);
  EXPECT_LE(rel(q.dx, d.dx), 1e-6);
  EXPECT_LE(rel(q.da, d.da), 1e-6);
  EXPECT_LE(rel(q.db, d.db), 1e-6);
  const Grads merged = run(nf4, a, b, 2.0, true);
  EXPECT_LE(rel(q.y, merged.y), 1e-6);
}

TEST(LoraLinear, DropoutReachesTheAdapterOnly) {
  FrozenWeight base;
  base.dense = torch::randn({6, 10});
  const at::Tensor x = torch::randn({4, 10});
  const at::Tensor zero_b = torch::zeros({6, 2});
  // B = 0 (a new adapter): the output is the base's whatever the dropout.
  const at::Tensor y = stratum::nn::lora_linear(x, base, at::Tensor(), torch::randn({2, 10}), zero_b, 1.0, 0.5, true);
  EXPECT_TRUE(y.allclose(at::matmul(x, base.dense.t())));
  // Same seed, same mask: the adapter sees dropout(x), the base x.
  const at::Tensor a = torch::randn({2, 10}), b = torch::randn({6, 2});
  torch::manual_seed(9);
  const at::Tensor got = stratum::nn::lora_linear(x, base, at::Tensor(), a, b, 1.0, 0.5, true);
  torch::manual_seed(9);
  const at::Tensor dropped = at::dropout(x, 0.5, true);
  EXPECT_TRUE(got.allclose(at::matmul(x, base.dense.t()) + at::matmul(at::matmul(dropped, a.t()), b.t())));
  const at::Tensor eval = stratum::nn::lora_linear(x, base, at::Tensor(), a, b, 1.0, 0.5, false);
  EXPECT_TRUE(eval.allclose(at::matmul(x, base.dense.t()) + at::matmul(at::matmul(x, a.t()), b.t())));
}

TEST(LoraLinear, ShapesThatDoNotFitAreNamed) {
  FrozenWeight base;
  base.dense = torch::randn({6, 10});
  auto error = [&](const at::Tensor& x, const at::Tensor& a, const at::Tensor& b) {
    try {
      stratum::nn::lora_linear(x, base, at::Tensor(), a, b, 1.0, 0.0, true);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(torch::randn({2, 9}), torch::randn({2, 10}), torch::randn({6, 2})).find("input features 9"),
            std::string::npos);
  EXPECT_NE(error(torch::randn({2, 10}), torch::randn({2, 10}), torch::randn({5, 2})).find("do not fit a 6x10 base"),
            std::string::npos);
  EXPECT_THROW(stratum::nn::lora_scale(0, 16, false), std::exception);
}

namespace {

// Three layers side by side as attention's q/k/v are: dense or NF4 bases
// (fp32), adapters on the first and last (none on the middle one).
std::vector<stratum::nn::Linear> side_by_side(bool nf4) {
  torch::manual_seed(11);
  std::vector<stratum::nn::Linear> layers;
  for (int64_t out : {128, 64, 64}) {
    stratum::nn::Linear l(128, out, /*bias=*/false);
    l->weight.requires_grad_(false);
    if (nf4) {
      l->nf4_base = true;
      l->nf4 = std::make_shared<const stratum::quant::Nf4Tensor>(stratum::quant::quantize_nf4(l->weight));
    }
    if (out != 64 || layers.size() == 2) {
      l->add_lora(4, 2.0, 0.0);
      l->lora_A->weight.set_data(torch::randn({4, 128}) * 0.1);  // drawn here (a model draws them by name)
      l->lora_B->weight.set_data(torch::randn({out, 4}) * 0.1);
    }
    layers.push_back(l);
  }
  return layers;
}

}  // namespace

// The stacked GEMMs (one for the bases, one each way for the adapters, the
// adds in the epilogue) against each layer apart: the outputs and every
// gradient within 1e-6, dense and NF4 bases.
TEST(LoraLinear, StackedLayersMatchEachLayerApart) {
  for (bool nf4 : {false, true}) {
    const auto layers = side_by_side(nf4);
    std::vector<const stratum::nn::LinearImpl*> views;
    for (const auto& l : layers) views.push_back(l.get());
    std::vector<at::Tensor> y(2), dx(2), da0(2), db2(2);
    for (int stacked : {0, 1}) {
      torch::manual_seed(5);
      at::Tensor x = torch::randn({2, 7, 128}).requires_grad_(true);
      at::Tensor out;
      if (stacked) {
        out = stratum::nn::add_lora_terms(stratum::nn::frozen_linear_stacked(x, views), x, views, true);
      } else {
        std::vector<at::Tensor> parts;
        for (const auto& l : layers) {
          at::Tensor p = stratum::nn::frozen_linear(x, *l);
          parts.push_back(l->has_lora() ? p + stratum::nn::lora_delta(x, *l, true) : p);
        }
        out = at::cat(parts, -1);
      }
      out.backward(torch::ones_like(out) * torch::randn({256}));
      y[stacked] = out.detach();
      dx[stacked] = x.grad().clone();
      da0[stacked] = layers[0]->lora_A->weight.grad().clone();
      db2[stacked] = layers[2]->lora_B->weight.grad().clone();
      for (const auto& l : layers)
        if (l->has_lora()) {
          l->lora_A->weight.mutable_grad().reset();
          l->lora_B->weight.mutable_grad().reset();
        }
    }
    const std::string what = nf4 ? "NF4 bases" : "dense bases";
    EXPECT_LE(rel(y[1], y[0]), 1e-6) << what;
    EXPECT_LE(rel(dx[1], dx[0]), 1e-6) << what;
    EXPECT_LE(rel(da0[1], da0[0]), 1e-6) << what;
    EXPECT_LE(rel(db2[1], db2[0]), 1e-6) << what;
  }
}
