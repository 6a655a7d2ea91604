// The block-wise cross-entropy against at::cross_entropy_loss on fp32 logits:
// loss and gradient, ignored targets, block sizes that do and do not divide the
// rows; on bf16 logits against the fp32 loss of the same values.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/core/error.h"
#include "stratum/nn/cross_entropy.h"
#include "stratum/nn/tiled_lm_loss.h"

using namespace stratum;

namespace {

struct LossAndGrad {
  double loss;
  at::Tensor grad;
};

LossAndGrad run(const at::Tensor& logits0, const at::Tensor& targets, bool chunked, int64_t block = 4096) {
  at::Tensor logits = logits0.detach().clone().requires_grad_(true);
  at::Tensor loss = chunked ? nn::chunked_cross_entropy(logits, targets, -100, block)
                            : at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                                     targets.reshape({-1}), {}, at::Reduction::Mean, -100);
  loss.backward();
  return {loss.item<double>(), logits.grad()};
}

}  // namespace

TEST(ChunkedCrossEntropy, MatchesTorchOnFp32Logits) {
  torch::manual_seed(0);
  at::Tensor logits = torch::randn({3, 7, 50}) * 3;
  at::Tensor targets = torch::randint(50, {3, 7});
  targets[0][2] = -100;
  targets[2][6] = -100;
  const LossAndGrad ref = run(logits, targets, false);
  for (int64_t block : {int64_t{1}, int64_t{4}, int64_t{21}, int64_t{4096}}) {
    const LossAndGrad got = run(logits, targets, true, block);
    EXPECT_NEAR(got.loss, ref.loss, 1e-6 * std::abs(ref.loss)) << "block " << block;
    EXPECT_LE((got.grad - ref.grad).abs().max().item<double>(), 1e-7) << "block " << block;
    EXPECT_EQ(got.grad[0][2].abs().max().item<double>(), 0.0) << "an ignored row has no gradient";
  }
}

TEST(ChunkedCrossEntropy, Bf16LogitsGiveTheFp32LossAndABf16Gradient) {
  torch::manual_seed(1);
  at::Tensor logits = (torch::randn({64, 300}) * 4).to(at::kBFloat16);
  at::Tensor targets = torch::randint(300, {64});
  const LossAndGrad ref = run(logits.to(at::kFloat), targets, false);
  const LossAndGrad got = run(logits, targets, true, 10);
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::abs(ref.loss));
  EXPECT_EQ(got.grad.scalar_type(), at::kBFloat16);
  EXPECT_LE((got.grad.to(at::kFloat) - ref.grad).abs().max().item<double>(),
            1e-2 * ref.grad.abs().max().item<double>());
}

// A model's own loss consumes its logits: the gradient is written over them
// (no second vocabulary-wide buffer) and equals the one written apart; on the
// GPU through the strided rows the LM head returns.
TEST(ChunkedCrossEntropy, ConsumedLogitsHoldTheirGradientAndMatchTheUsualOne) {
  torch::manual_seed(3);
  std::vector<c10::Device> devices{c10::kCPU};
  if (torch::cuda::is_available()) devices.push_back(c10::Device(c10::kCUDA, 0));
  for (const c10::Device device : devices)
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const at::Tensor wide = (torch::randn({4, 9, 77}) * 3).to(device, dtype);
      const at::Tensor targets = torch::randint(64, {4, 9}).to(device);
      at::Tensor grads[2], logits[2];
      for (int consume : {0, 1}) {
        at::Tensor source = wide.detach().clone().requires_grad_(true);
        logits[consume] = (source * 1).narrow(2, 0, 64);  // not a leaf: rows strided by 77, as the head's
        nn::chunked_cross_entropy(logits[consume], targets, -100, 5, consume == 1).backward();
        grads[consume] = source.grad().narrow(2, 0, 64);
      }
      const std::string what = std::string(c10::toString(dtype)) + " on " + device.str();
      EXPECT_TRUE(at::equal(grads[1], grads[0])) << what;
      EXPECT_TRUE(at::equal(logits[1].detach(), grads[0])) << what << ": the logits now hold their gradient";
      EXPECT_FALSE(at::equal(logits[0].detach(), grads[0])) << what;
    }
}

TEST(ChunkedCrossEntropy, BadInputIsNamed) {
  EXPECT_THROW(nn::chunked_cross_entropy(torch::randn({2, 3, 5}), torch::zeros({2, 4}, at::kLong)), Error);
  EXPECT_THROW(nn::chunked_cross_entropy(torch::zeros({2, 5}, at::kLong), torch::zeros({2}, at::kLong)), Error);
  EXPECT_THROW(nn::chunked_cross_entropy(torch::randn({2, 5}), torch::zeros({2}, at::kLong), -100, 0), Error);
}

// The GPU kernels (one pass a row each way) against torch's cross-entropy on
// the same values in fp32: bf16 logits read through a strided row view (as
// the LM head returns them), ignored targets, fp32 logits too.
TEST(ChunkedCrossEntropy, GpuKernelsMatchTorch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  torch::manual_seed(5);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  for (auto dtype : {torch::kBFloat16, torch::kFloat}) {
    for (int64_t vocab : {int64_t{67}, int64_t{50257}}) {
      at::Tensor wide = (torch::randn({3, 11, vocab + 13}, cuda) * 4).to(dtype);
      at::Tensor logits = wide.narrow(2, 0, vocab);  // rows strided by vocab + 13
      at::Tensor targets = torch::randint(vocab, {3, 11}, cuda.dtype(torch::kLong));
      targets[1][4] = -100;
      targets[2][0] = -100;
      at::Tensor mine = logits.detach().clone().requires_grad_(true);  // a contiguous copy for the reference
      at::Tensor view = logits.detach().requires_grad_(true);
      at::Tensor loss = nn::chunked_cross_entropy(view, targets);
      loss.backward();
      at::Tensor ref = at::cross_entropy_loss(mine.to(torch::kFloat).reshape({-1, vocab}), targets.reshape({-1}), {},
                                              at::Reduction::Mean, -100);
      ref.backward();
      const std::string what = std::string(c10::toString(dtype)) + " vocab " + std::to_string(vocab);
      EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-5 * std::abs(ref.item<double>())) << what;
      EXPECT_EQ(view.grad().scalar_type(), dtype) << what;
      const at::Tensor got = view.grad().to(torch::kFloat), want = mine.grad().to(torch::kFloat);
      const double tol = dtype == torch::kFloat ? 1e-6 : 8e-3;  // bf16 rounding of the stored gradient
      EXPECT_LE((got - want).abs().max().item<double>(), tol * want.abs().max().item<double>()) << what;
      EXPECT_EQ(got[1][4].abs().max().item<double>(), 0.0) << "an ignored row has no gradient; " << what;
    }
  }
}

// nn::tiled_lm_head_loss (the LM head and its loss fused, a tile of rows at a
// time) against the untiled path it replaces: the head's logits, then
// nn::chunked_cross_entropy (and torch's loss): the same loss and gradients of
// the hidden states and the weight, with ignored rows, for tiles that do and
// do not divide the rows, a single row tile, and a tile wider than the rows.
namespace {

struct HeadGrads {
  double loss;
  at::Tensor hidden_grad, weight_grad;
};

HeadGrads run_head(const at::Tensor& hidden0, const at::Tensor& weight0, const at::Tensor& targets, int64_t tile) {
  at::Tensor hidden = hidden0.detach().clone().requires_grad_(true);
  at::Tensor weight = weight0.detach().clone().requires_grad_(true);
  at::Tensor loss = tile > 0 ? nn::tiled_lm_head_loss(hidden, weight, targets, -100, tile)
                             : nn::chunked_cross_entropy(at::linear(hidden, weight), targets);
  loss.backward();
  return {loss.item<double>(), hidden.grad(), weight.grad()};
}

double rel(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-12);
}

}  // namespace

TEST(TiledLoss, MatchesUntiledCrossEntropy) {
  torch::manual_seed(5);
  const at::Tensor hidden = torch::randn({3, 7, 16}), weight = torch::randn({37, 16}) * 0.5;  // V: no multiple of 64
  at::Tensor targets = torch::randint(37, {3, 7});
  targets[0][0] = -100;
  targets[1][4] = -100;
  targets[2][6] = -100;
  const HeadGrads ref = run_head(hidden, weight, targets, 0);
  const double torch_loss = at::cross_entropy_loss(at::linear(hidden, weight).reshape({-1, 37}), targets.reshape({-1}),
                                                   {}, at::Reduction::Mean, -100)
                                .item<double>();
  EXPECT_NEAR(ref.loss, torch_loss, 1e-6 * std::abs(torch_loss));
  for (int64_t tile : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{21}, int64_t{1000}}) {
    const HeadGrads got = run_head(hidden, weight, targets, tile);
    EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::abs(ref.loss)) << "tile " << tile;
    EXPECT_EQ(got.hidden_grad.sizes(), hidden.sizes());
    EXPECT_LE(rel(got.hidden_grad, ref.hidden_grad), 1e-5) << "tile " << tile;
    EXPECT_LE(rel(got.weight_grad, ref.weight_grad), 1e-5) << "tile " << tile;
    // Ignored rows get no hidden gradient.
    EXPECT_EQ(got.hidden_grad[1][4].abs().max().item<double>(), 0.0);
  }
}

// A tied head: the weight is also the embedding the hidden states were looked
// up from; its gradient is the lookup's plus the head's, as untiled.
TEST(TiledLoss, TiedHeadMatchesUntiledCrossEntropy) {
  torch::manual_seed(6);
  const at::Tensor table0 = torch::randn({40, 12}) * 0.5, mix = torch::randn({12, 12}) * 0.3;
  const at::Tensor tokens = torch::randint(40, {2, 9}), targets = torch::randint(40, {2, 9});
  auto run_tied = [&](int64_t tile) {
    at::Tensor table = table0.clone().requires_grad_(true);
    const at::Tensor hidden = at::tanh(at::embedding(table, tokens).matmul(mix));
    at::Tensor loss = tile > 0 ? nn::tiled_lm_head_loss(hidden, table, targets, -100, tile)
                               : nn::chunked_cross_entropy(at::linear(hidden, table), targets);
    loss.backward();
    return std::make_pair(loss.item<double>(), table.grad());
  };
  const auto [ref_loss, ref_grad] = run_tied(0);
  for (int64_t tile : {int64_t{1}, int64_t{5}, int64_t{18}}) {
    const auto [loss, grad] = run_tied(tile);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss)) << "tile " << tile;
    EXPECT_LE(rel(grad, ref_grad), 1e-5) << "tile " << tile;
  }
}

TEST(TiledLoss, AllIgnoredIsNanAndBadArgumentsAreNamed) {
  const at::Tensor hidden = torch::randn({4, 8}), weight = torch::randn({10, 8});
  EXPECT_TRUE(std::isnan(nn::tiled_lm_head_loss(hidden, weight, torch::full({4}, -100, torch::kLong), -100, 2)
                             .item<double>()));
  EXPECT_THROW(nn::tiled_lm_head_loss(hidden, weight, torch::zeros({3}, torch::kLong), -100, 2), Error);
  EXPECT_THROW(nn::tiled_lm_head_loss(hidden, torch::randn({10, 7}), torch::zeros({4}, torch::kLong), -100, 2), Error);
  EXPECT_THROW(nn::tiled_lm_head_loss(hidden, weight, torch::zeros({4}, torch::kLong), -100, 0), Error);
}
