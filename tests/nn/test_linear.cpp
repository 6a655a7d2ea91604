// nn::linear_aligned_rows against at::linear: same values and gradients for
// widths that are and are not multiples of 64, output rows laid out aligned,
// and the aligned gradient of the chunked cross-entropy taken without a copy.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/nn/cross_entropy.h"
#include "stratum/nn/linear.h"

using namespace stratum;

namespace {

struct Grads {
  at::Tensor out, gx, gw;
};

Grads run(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& upstream, bool aligned) {
  at::Tensor x = x0.detach().clone().requires_grad_(true);
  at::Tensor w = w0.detach().clone().requires_grad_(true);
  at::Tensor out = aligned ? nn::linear_aligned_rows(x, w) : at::linear(x, w);
  (out * upstream).sum().backward();
  return {out.detach(), x.grad(), w.grad()};
}

}  // namespace

TEST(LinearAlignedRows, MatchesLinearForAnyWidth) {
  torch::manual_seed(0);
  for (int64_t width : {int64_t{67}, int64_t{128}, int64_t{1}}) {
    at::Tensor x = torch::randn({2, 5, 24});
    at::Tensor w = torch::randn({width, 24});
    at::Tensor upstream = torch::randn({2, 5, width});
    const Grads ref = run(x, w, upstream, false), got = run(x, w, upstream, true);
    EXPECT_EQ(got.out.sizes(), ref.out.sizes());
    EXPECT_TRUE(torch::allclose(got.out, ref.out, 1e-5, 1e-5)) << "width " << width;
    EXPECT_TRUE(torch::allclose(got.gx, ref.gx, 1e-5, 1e-5)) << "width " << width;
    EXPECT_TRUE(torch::allclose(got.gw, ref.gw, 1e-5, 1e-5)) << "width " << width;
    EXPECT_EQ(got.out.stride(1) % 64, 0) << "rows are not 64-element aligned at width " << width;
  }
}

TEST(LinearAlignedRows, AlignedRowsBuffer) {
  at::Tensor t = nn::empty_aligned_rows(3, 67, at::TensorOptions().dtype(at::kBFloat16));
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 67}));
  EXPECT_EQ(t.stride(0), 128);
  EXPECT_TRUE(nn::empty_aligned_rows(3, 128, at::TensorOptions()).is_contiguous());
}

TEST(LinearAlignedRows, ChunkedCrossEntropyGradientArrivesAligned) {
  // The loss's gradient is laid out as the LM head wants it: the head's backward
  // sees an aligned [N, V] view (nothing to copy) and still matches at::linear.
  torch::manual_seed(1);
  at::Tensor h = torch::randn({2, 6, 16}, torch::requires_grad());
  at::Tensor w = torch::randn({67, 16}, torch::requires_grad());
  at::Tensor targets = torch::randint(67, {2, 6});
  at::Tensor logits = nn::linear_aligned_rows(h, w);
  at::Tensor grad_logits;
  logits.register_hook([&](const at::Tensor& g) { grad_logits = g; });
  nn::chunked_cross_entropy(logits, targets, -100, 5).backward();
  ASSERT_TRUE(grad_logits.defined());
  EXPECT_EQ(grad_logits.stride(1) % 64, 0);
  at::Tensor h2 = h.detach().clone().requires_grad_(true), w2 = w.detach().clone().requires_grad_(true);
  at::cross_entropy_loss(at::linear(h2, w2).reshape({-1, 67}), targets.reshape({-1})).backward();
  EXPECT_TRUE(torch::allclose(h.grad(), h2.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(w.grad(), w2.grad(), 1e-5, 1e-6));
}
