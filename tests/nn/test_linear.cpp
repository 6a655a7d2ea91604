// nn::linear_padded_rows against at::linear: same values and gradients for
// widths that are and are not multiples of 64, and behind the chunked
// cross-entropy (the LM head's real use); nn::linear_stacked against separate linears.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/nn/cross_entropy.h"
#include "stratum/nn/linear.h"

using namespace stratum;

namespace {

struct Grads {
  at::Tensor out, gx, gw;
};

Grads run(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& upstream, bool padded) {
  at::Tensor x = x0.detach().clone().requires_grad_(true);
  at::Tensor w = w0.detach().clone().requires_grad_(true);
  at::Tensor out = padded ? nn::linear_padded_rows(x, w) : at::linear(x, w);
  (out * upstream).sum().backward();
  return {out.detach(), x.grad(), w.grad()};
}

}  // namespace

TEST(LinearPaddedRows, MatchesLinearForAnyWidth) {
  torch::manual_seed(0);
  for (int64_t width : {int64_t{67}, int64_t{128}, int64_t{1}}) {
    at::Tensor x = torch::randn({2, 5, 24});
    at::Tensor w = torch::randn({width, 24});
    at::Tensor upstream = torch::randn({2, 5, width});
    const Grads ref = run(x, w, upstream, false), got = run(x, w, upstream, true);
    EXPECT_EQ(got.out.sizes(), ref.out.sizes());
    EXPECT_EQ(got.gw.sizes(), ref.gw.sizes());
    EXPECT_TRUE(torch::allclose(got.out, ref.out, 1e-5, 1e-5)) << "width " << width;
    EXPECT_TRUE(torch::allclose(got.gx, ref.gx, 1e-5, 1e-5)) << "width " << width;
    EXPECT_TRUE(torch::allclose(got.gw, ref.gw, 1e-5, 1e-5)) << "width " << width;
  }
}

TEST(LinearPaddedRows, BehindTheChunkedCrossEntropy) {
  torch::manual_seed(1);
  at::Tensor h = torch::randn({2, 6, 16}, torch::requires_grad());
  at::Tensor w = torch::randn({67, 16}, torch::requires_grad());
  at::Tensor targets = torch::randint(67, {2, 6});
  at::Tensor logits = nn::linear_padded_rows(h, w);
  std::vector<int64_t> grad_strides;
  logits.register_hook([&](const at::Tensor& g) { grad_strides = g.strides().vec(); });
  at::Tensor loss = nn::chunked_cross_entropy(logits, targets, -100, 5);
  loss.backward();
  // The logits' gradient comes back in their padded rows (the head's backward
  // reads it in place, no copy): 128 elements apart, like the logits.
  EXPECT_EQ(logits.strides().vec(), (std::vector<int64_t>{6 * 128, 128, 1}));
  EXPECT_EQ(grad_strides, logits.strides().vec());
  at::Tensor h2 = h.detach().clone().requires_grad_(true), w2 = w.detach().clone().requires_grad_(true);
  at::Tensor ref = at::cross_entropy_loss(at::linear(h2, w2).reshape({-1, 67}), targets.reshape({-1}));
  ref.backward();
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-6);
  EXPECT_TRUE(torch::allclose(h.grad(), h2.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(w.grad(), w2.grad(), 1e-5, 1e-6));
}

// A gradient that arrives in strided rows gives the same gradients as a
// contiguous one.
TEST(LinearPaddedRows, TakesAGradientInStridedRows) {
  torch::manual_seed(3);
  const at::Tensor x0 = torch::randn({2, 5, 24}), w0 = torch::randn({67, 24});
  const at::Tensor wide = torch::randn({10, 128});
  const at::Tensor upstream = wide.narrow(1, 0, 67).view({2, 5, 67});  // rows 128 elements apart
  at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  nn::linear_padded_rows(x, w).backward(upstream);
  at::Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
  at::linear(xr, wr).backward(upstream.contiguous());
  EXPECT_TRUE(torch::allclose(x.grad(), xr.grad(), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(w.grad(), wr.grad(), 1e-5, 1e-5));
  EXPECT_EQ(w.grad().sizes(), w.sizes());
}

// linear_stacked: one GEMM over [W0; W1; W2] equals three linears of the same
// input, values and gradients; a frozen weight gets no gradient, the others do.
TEST(LinearStacked, MatchesSeparateLinears) {
  torch::manual_seed(2);
  const at::Tensor x0 = torch::randn({2, 5, 24});
  const std::vector<at::Tensor> w0 = {torch::randn({16, 24}), torch::randn({8, 24}), torch::randn({8, 24})};
  const at::Tensor upstream = torch::randn({2, 5, 32});
  for (bool freeze_middle : {false, true}) {
    auto leaves = [&](std::vector<at::Tensor>& ws) {
      at::Tensor x = x0.clone().requires_grad_(true);
      for (size_t i = 0; i < w0.size(); ++i) ws.push_back(w0[i].clone().requires_grad_(!(freeze_middle && i == 1)));
      return x;
    };
    std::vector<at::Tensor> ws, refs;
    at::Tensor x = leaves(ws), xr = leaves(refs);
    const at::Tensor got = nn::linear_stacked(x, ws);
    const at::Tensor want = at::cat({at::linear(xr, refs[0]), at::linear(xr, refs[1]), at::linear(xr, refs[2])}, -1);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5));
    (got * upstream).sum().backward();
    (want * upstream).sum().backward();
    EXPECT_TRUE(torch::allclose(x.grad(), xr.grad(), 1e-5, 1e-5));
    for (size_t i = 0; i < ws.size(); ++i) {
      ASSERT_EQ(ws[i].grad().defined(), refs[i].grad().defined()) << "weight " << i;
      if (ws[i].grad().defined()) EXPECT_TRUE(torch::allclose(ws[i].grad(), refs[i].grad(), 1e-5, 1e-5)) << "weight " << i;
    }
    EXPECT_EQ(ws[1].grad().defined(), !freeze_middle);
  }
}
