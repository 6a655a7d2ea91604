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

// Blocks at magnitudes 2^-4 .. 2^4 of representable values, each block's
// largest at 448 x its magnitude: every block's scale is a power of two, so
// each block comes back exactly; the last blocks along each axis are partial.
TEST(Float8Cast, RepresentableValuesCastExactlyInBlocks) {
  torch::manual_seed(3);
  for (const auto& [scaling, block_rows] : std::vector<std::pair<Scaling, int64_t>>{{Scaling::blocks_1x128, 1},
                                                                                     {Scaling::blocks_128x128, 128}}) {
    const int64_t r = 200, c = 300, rb = (r + block_rows - 1) / block_rows, cb = 3;
    at::Tensor x = representable(r, c, false).abs().clamp_max(240.0);
    at::Tensor magnitude = torch::pow(2.0, torch::randint(-4, 5, {rb, cb}).to(torch::kFloat));
    for (int64_t i = 0; i < rb; ++i)
      for (int64_t j = 0; j < cb; ++j) {
        at::Tensor block = x.narrow(0, i * block_rows, std::min(block_rows, r - i * block_rows))
                               .narrow(1, j * kBlock, std::min(kBlock, c - j * kBlock));
        block[0][0] = 448.0;
        block.mul_(magnitude[i][j]);
      }
    const Float8Pair p = cast_reference(x.to(torch::kBFloat16), {Format::e4m3, scaling, false}, true);
    ASSERT_EQ(p.rows.scale_inv.sizes(), (std::vector<int64_t>{rb, cb}));
    EXPECT_EQ(block_scaling(p.rows), scaling);
    EXPECT_TRUE(torch::equal(p.rows.scale_inv, magnitude));
    EXPECT_TRUE(torch::equal(dequantize(p.rows), x));
    ASSERT_EQ(p.transposed.data.sizes(), (std::vector<int64_t>{c, r}));
    if (scaling == Scaling::blocks_128x128) {
      // A square block transposed: the same bytes and scales.
      EXPECT_TRUE(torch::equal(p.transposed.data.to(torch::kFloat), p.rows.data.to(torch::kFloat).t()));
      EXPECT_TRUE(torch::equal(p.transposed.scale_inv, p.rows.scale_inv.t()));
      EXPECT_TRUE(torch::equal(dequantize(p.transposed), x.t()));
    } else {
      // 1x128 blocks of xᵀ's rows: runs of 128 of x's rows, scaled by their own amax.
      ASSERT_EQ(p.transposed.scale_inv.sizes(), (std::vector<int64_t>{c, 2}));
      const at::Tensor back = dequantize(p.transposed);
      EXPECT_LT(((back - x.t()).norm() / x.norm()).item<double>(), 0.05);
    }
  }
}

// One outlier 2e5 times the rest: under one scale the rest fall to e4m3's
// subnormals and lose most of their bits; in blocks only the outlier's
// block is scaled for it.
TEST(Float8Cast, AnOutlierMovesOnlyItsBlocksScale) {
  torch::manual_seed(4);
  at::Tensor x = torch::randn({256, 512});
  x[5][7] = 2e5;
  const at::Tensor rest = torch::ones({256, 512}).index_put_({torch::indexing::Slice(0, 128), torch::indexing::Slice(0, 128)}, 0);
  auto err = [&](Scaling s) {
    const at::Tensor back = dequantize(cast_reference(x, {Format::e4m3, s, false}, false).rows);
    return (((back - x) * rest).norm() / (x * rest).norm()).item<double>();
  };
  const double tensorwise = err(Scaling::tensorwise), blocks = err(Scaling::blocks_128x128), rows = err(Scaling::blocks_1x128);
  EXPECT_LT(blocks, 0.05);
  EXPECT_LT(rows, 0.05);
  EXPECT_GT(tensorwise, 4 * blocks);
  std::printf("relative error away from the outlier: tensorwise %.4f, 128x128 %.4f, 1x128 %.4f\n", tensorwise, blocks, rows);
}

// A shard of a matrix split over a group casts as its slice of the whole
// when the split falls between blocks, and is refused, naming the width,
// when a block would span it.
TEST(Float8Cast, BlockwiseShardsMustHoldWholeBlocks) {
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({256, 512});
  const AmaxReducer never = [](at::Tensor&) { FAIL() << "blockwise scales reduce nothing"; };
  for (Scaling s : {Scaling::blocks_1x128, Scaling::blocks_128x128}) {
    const CastSpec spec{Format::e4m3, s, false};
    const Float8Pair whole = cast_reference(x, spec, false);
    const Float8Pair right = cast_shard(x.narrow(1, 256, 256).contiguous(), spec, false, 1, never);
    EXPECT_TRUE(torch::equal(right.rows.data.to(torch::kFloat), whole.rows.data.narrow(1, 256, 256).to(torch::kFloat)));
    EXPECT_TRUE(torch::equal(right.rows.scale_inv, whole.rows.scale_inv.narrow(1, 2, 2)));
    try {
      cast_shard(x.narrow(1, 0, 192).contiguous(), spec, false, 1, never);
      FAIL() << "no error";
    } catch (const stratum::Error& e) {
      EXPECT_NE(std::string(e.what()).find("192 columns wide"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("multiples of 128"), std::string::npos) << e.what();
    }
  }
  // Rows split: 1x128 blocks run along the columns only, unless the transposed copy is cast too.
  const CastSpec rows{Format::e4m3, Scaling::blocks_1x128, false};
  EXPECT_NO_THROW(cast_shard(x.narrow(0, 0, 96).contiguous(), rows, false, 0, never));
  EXPECT_THROW(cast_shard(x.narrow(0, 0, 96).contiguous(), rows, true, 0, never), stratum::Error);
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
  for (Scaling s : {Scaling::tensorwise, Scaling::rowwise, Scaling::blocks_1x128, Scaling::blocks_128x128}) {
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
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {33, 65}, {128, 256}, {1000, 96}, {7, 4100},
                                                                {300, 200}})
      for (Scaling s : {Scaling::tensorwise, Scaling::rowwise, Scaling::blocks_1x128})
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
