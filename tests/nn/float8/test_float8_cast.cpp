// FP8 scaling and casts (nn/float8/scaling.h, cast.h): the ATen reference on
// the CPU (exact for representable values, saturation, zero amax, NaN
// named), and on a GPU the fused kernels against it bit for bit.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/core/error.h"
#include "stratum/nn/float8/cast.h"
#include "stratum/nn/float8/float8_projection.h"

namespace {

using namespace stratum::nn::float8;

// Every finite e4m3 value (bytes 0x00..0x7e, both signs), as fp32.
at::Tensor e4m3_values() {
  const at::Tensor bytes = torch::arange(0, 127, torch::kUInt8);
  const at::Tensor pos = bytes.view(at::kFloat8_e4m3fn).to(torch::kFloat);
  return torch::cat({pos, -pos});
}

// A [rows, cols] matrix of representable e4m3 values with `amax` 448 (scale 1).
at::Tensor representable(int64_t rows, int64_t cols, bool each_row_at_max) {
  const at::Tensor v = e4m3_values();
  at::Tensor x = v.index({torch::randint(0, v.size(0), {rows, cols})});
  if (each_row_at_max) x.select(1, 0).fill_(448.0);
  else x.view(-1)[0] = -448.0;
  return x;
}

TEST(Float8Cast, RepresentableValuesCastExactlyTensorwise) {
  torch::manual_seed(1);
  const at::Tensor x = representable(24, 40, false);
  const Float8Pair p = cast_reference(x, {Format::e4m3, Scaling::tensorwise, false}, true);
  EXPECT_EQ(p.rows.scale_inv.item<float>(), 1.0f);
  EXPECT_TRUE(torch::equal(p.rows.data.to(torch::kFloat), x));
  EXPECT_TRUE(torch::equal(dequantize(p.rows), x));
  // The transposed copy holds the same bytes.
  EXPECT_TRUE(torch::equal(p.transposed.data.to(torch::kFloat), x.t()));
  EXPECT_TRUE(p.transposed.data.is_contiguous());
  // Halved, a power-of-two scale (2) brings them back exactly.
  const Float8Pair half = cast_reference(x / 2, {Format::e4m3, Scaling::tensorwise, true}, false);
  EXPECT_EQ(half.rows.scale_inv.item<float>(), 0.5f);
  EXPECT_TRUE(torch::equal(dequantize(half.rows), x / 2));
}

TEST(Float8Cast, RepresentableValuesCastExactlyRowwise) {
  torch::manual_seed(2);
  // Rows at different magnitudes: each row's own power-of-two scale.
  const at::Tensor x = representable(16, 32, true) * torch::pow(2.0, torch::arange(-8, 8).to(torch::kFloat)).unsqueeze(1);
  const Float8Pair p = cast_reference(x.to(torch::kBFloat16), {Format::e4m3, Scaling::rowwise, true}, true);
  ASSERT_EQ(p.rows.scale_inv.sizes(), (std::vector<int64_t>{16}));
  EXPECT_TRUE(torch::equal(dequantize(p.rows), x));
  // The transposed copy is scaled per column of x (its rows): within e4m3's
  // rounding (small entries of a column fall to e4m3's subnormals).
  ASSERT_EQ(p.transposed.data.sizes(), (std::vector<int64_t>{32, 16}));
  const at::Tensor back = dequantize(p.transposed);
  EXPECT_LT(((back - x.t()).norm() / x.norm()).item<double>(), 0.05);
}

TEST(Float8Cast, ScaleMapsAmaxToTheFormatsEdge) {
  const at::Tensor amax = torch::tensor({1.0f, 3.0f, 448.0f, 0.001f});
  const at::Tensor s4 = scale_from_amax(amax, Format::e4m3, false);
  EXPECT_TRUE(torch::allclose(s4, 448.0f / amax));
  const at::Tensor s5 = scale_from_amax(amax, Format::e5m2, false);
  EXPECT_TRUE(torch::allclose(s5, 57344.0f / amax));
  // Powers of two at or below the exact scale.
  const at::Tensor p2 = scale_from_amax(amax, Format::e4m3, true);
  EXPECT_TRUE(torch::equal(p2, torch::tensor({256.0f, 128.0f, 1.0f, 262144.0f})));
}

TEST(Float8Cast, SaturatesBeyondTheFormatsRange) {
  const at::Tensor x = torch::tensor({{1.0f, 300.0f, -1000.0f, 1e6f}});
  const Float8Tensor q = cast_with_scale(x, torch::tensor(1.0f), Format::e4m3);
  EXPECT_TRUE(torch::equal(q.data.to(torch::kFloat), torch::tensor({{1.0f, 288.0f, -448.0f, 448.0f}})));
  const Float8Tensor q5 = cast_with_scale(x * 100, torch::tensor(1.0f), Format::e5m2);
  EXPECT_TRUE(torch::equal(q5.data.to(torch::kFloat), torch::tensor({{96.0f, 28672.0f, -57344.0f, 57344.0f}})));
}

TEST(Float8Cast, ZeroAmaxGivesZerosWithAFiniteScale) {
  for (Scaling s : {Scaling::tensorwise, Scaling::rowwise}) {
    const at::Tensor x = torch::zeros({8, 16}, torch::kBFloat16);
    const Float8Pair p = cast_reference(x, {Format::e4m3, s, s == Scaling::rowwise}, true);
    EXPECT_TRUE(torch::isfinite(p.rows.scale_inv).all().item<bool>());
    EXPECT_TRUE(torch::isfinite(p.transposed.scale_inv).all().item<bool>());
    EXPECT_TRUE(torch::equal(dequantize(p.rows), torch::zeros({8, 16})));
  }
  // One zero row among others under rowwise scaling.
  at::Tensor x = torch::randn({4, 16});
  x[2].zero_();
  const Float8Pair p = cast_reference(x, {Format::e4m3, Scaling::rowwise, true}, false);
  EXPECT_TRUE(torch::isfinite(p.rows.scale_inv).all().item<bool>());
  EXPECT_TRUE(torch::equal(dequantize(p.rows)[2], torch::zeros({16})));
}

TEST(Float8Cast, NonFiniteAmaxIsNamed) {
  at::Tensor x = torch::randn({4, 16});
  x[1][3] = std::numeric_limits<float>::quiet_NaN();
  const Float8Pair p = cast_reference(x, {Format::e4m3, Scaling::tensorwise, false}, false);
  try {
    check_finite_amax(p.rows.amax, "the input x of layer h.0.attn.c_attn");
    FAIL() << "no error";
  } catch (const stratum::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the input x of layer h.0.attn.c_attn holds NaN"), std::string::npos)
        << e.what();
  }
  x[1][3] = std::numeric_limits<float>::infinity();
  const Float8Pair inf = cast_reference(x, {Format::e4m3, Scaling::rowwise, true}, false);
  EXPECT_THROW(check_finite_amax(inf.rows.amax, "dy"), stratum::Error);
}

// --- GPU: the fused kernels against the reference, bit for bit -----------------

TEST(Float8CastGpu, KernelsMatchTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU (the fused cast kernels)";
  torch::manual_seed(5);
  for (auto dtype : {torch::kBFloat16, torch::kFloat, torch::kHalf})
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {33, 65}, {128, 256}, {1000, 96}, {7, 4100}})
      for (Scaling s : {Scaling::tensorwise, Scaling::rowwise})
        for (Format f : {Format::e4m3, Format::e5m2})
          for (bool pow2 : {false, true}) {
            SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(c));
            at::Tensor x = (torch::randn({r, c}) * 3).to(dtype);
            if (r > 2) x[2].zero_();  // a zero row
            const at::Tensor xg = x.cuda();
            const CastSpec spec{f, s, pow2};
            const Float8Pair want = cast_reference(x, spec, true);
            const Float8Pair got = cast(xg, spec, true);
            auto bytes = [](const at::Tensor& t) { return t.view(torch::kUInt8).cpu(); };
            EXPECT_TRUE(torch::equal(bytes(got.rows.data), bytes(want.rows.data)));
            EXPECT_TRUE(torch::equal(bytes(got.transposed.data), bytes(want.transposed.data)));
            EXPECT_TRUE(torch::equal(got.rows.scale_inv.cpu(), want.rows.scale_inv));
            EXPECT_TRUE(torch::equal(got.transposed.scale_inv.cpu(), want.transposed.scale_inv));
            EXPECT_TRUE(torch::equal(got.rows.amax.cpu(), want.rows.amax));
          }
}

TEST(Float8CastGpu, KernelsPropagateNaNIntoTheAmax) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU (the fused cast kernels)";
  at::Tensor x = torch::randn({64, 64}, torch::kBFloat16);
  x[5][7] = std::numeric_limits<float>::quiet_NaN();
  for (Scaling s : {Scaling::tensorwise, Scaling::rowwise}) {
    const Float8Pair got = cast(x.cuda(), {Format::e4m3, s, false}, true);
    EXPECT_TRUE(torch::isnan(got.rows.amax).any().item<bool>());
    EXPECT_TRUE(torch::isnan(got.transposed.amax).any().item<bool>());
  }
}

}  // namespace
