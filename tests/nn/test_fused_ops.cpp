// nn::swiglu, nn::rotary, nn::layer_norm, nn::add_layer_norm,
// nn::linear_bias_gelu, nn::gelu_mlp, nn::swiglu_linear and nn::bias_grad
// against the ATen ops they replace: values and gradients on the CPU (the composite path) and, on a GPU, the
// fused kernels in fp32 (tight) and bf16 (within bf16 rounding), with shapes
// that exercise several row tiles and a partial column tile.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/core/error.h"
#include "stratum/nn/layer_norm.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/mlp.h"
#include "stratum/nn/rope.h"
#include "stratum/nn/tiled_rows.h"
#ifdef STRATUM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

using namespace stratum;

namespace {

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(torch::kFloat).cpu(), w = want.to(torch::kFloat).cpu();
  return (g - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-12);
}

struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

// Runs f on leaf copies of `inputs` (in `dtype` on `device`), backward with `upstream`.
template <typename F>
Result run(F f, const std::vector<at::Tensor>& inputs, const at::Tensor& upstream, torch::Dtype dtype,
           torch::Device device) {
  std::vector<at::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.to(device, dtype).detach().requires_grad_(true));
  at::Tensor out = f(leaves);
  out.backward(upstream.to(device, dtype));
  Result r{out.detach()};
  for (const auto& l : leaves) r.grads.push_back(l.grad());
  return r;
}

at::Tensor swiglu_ref(const std::vector<at::Tensor>& in) {
  const int64_t f = in[0].size(-1) / 2;
  return at::silu(in[0].narrow(-1, 0, f)) * in[0].narrow(-1, f, f);
}
at::Tensor swiglu_fused(const std::vector<at::Tensor>& in) { return nn::swiglu(in[0]); }
// x [B, H, T, D] as attention gets it: a transposed view of [B, T, H, D].
at::Tensor rotary_ref(const std::vector<at::Tensor>& in) {
  const at::Tensor x = in[0].transpose(1, 2);
  const int64_t half = x.size(-1) / 2;
  return x * in[1] + at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * in[2];
}
at::Tensor rotary_fused(const std::vector<at::Tensor>& in) {
  return nn::rotary(in[0].transpose(1, 2), in[1].detach(), in[2].detach());
}
at::Tensor gelu_ref(const std::vector<at::Tensor>& in) { return at::gelu(at::linear(in[0], in[1], in[2]), "tanh"); }
at::Tensor gelu_fused(const std::vector<at::Tensor>& in) { return nn::linear_bias_gelu(in[0], in[1], in[2]); }
at::Tensor gelu_mlp_ref(const std::vector<at::Tensor>& in) {
  return at::linear(at::gelu(at::linear(in[0], in[1], in[2]), "tanh"), in[3], in[4]);
}
at::Tensor gelu_mlp_fused(const std::vector<at::Tensor>& in) { return nn::gelu_mlp(in[0], in[1], in[2], in[3], in[4]); }
at::Tensor gelu_mlp_kept(const std::vector<at::Tensor>& in) {
  return nn::gelu_mlp(in[0], in[1], in[2], in[3], in[4], /*keep_activation=*/true);
}
at::Tensor swiglu_linear_ref(const std::vector<at::Tensor>& in) { return at::linear(swiglu_ref(in), in[1]); }
at::Tensor swiglu_linear_fused(const std::vector<at::Tensor>& in) { return nn::swiglu_linear(in[0], in[1]); }
at::Tensor layer_norm_ref(const std::vector<at::Tensor>& in) {
  return at::layer_norm(in[0], {in[0].size(-1)}, in[1], in[2], 1e-5);
}
at::Tensor layer_norm_fused(const std::vector<at::Tensor>& in) { return nn::layer_norm(in[0], in[1], in[2], 1e-5); }

// The fused result in `dtype` on `device` against the reference in fp32 on the CPU.
void expect_matches(at::Tensor (*fused)(const std::vector<at::Tensor>&),
                    at::Tensor (*ref)(const std::vector<at::Tensor>&), const std::vector<at::Tensor>& inputs,
                    const at::Tensor& upstream, torch::Dtype dtype, torch::Device device, double tol,
                    const std::string& what, size_t compared_grads = 99) {
  // The reference sees the inputs as rounded to dtype, so only the arithmetic differs.
  std::vector<at::Tensor> rounded;
  for (const auto& t : inputs) rounded.push_back(t.to(dtype).to(torch::kFloat));
  const Result want = run(ref, rounded, upstream.to(dtype).to(torch::kFloat), torch::kFloat, torch::kCPU);
  const Result got = run(fused, inputs, upstream, dtype, device);
  EXPECT_EQ(got.out.scalar_type(), dtype) << what;
  EXPECT_LE(rel_err(got.out, want.out), tol) << what << ": output";
  for (size_t i = 0; i < std::min(want.grads.size(), compared_grads); ++i) {
    ASSERT_TRUE(got.grads[i].defined()) << what << ": gradient " << i;
    EXPECT_EQ(got.grads[i].sizes(), want.grads[i].sizes()) << what << ": gradient " << i;
    EXPECT_LE(rel_err(got.grads[i], want.grads[i]), tol) << what << ": gradient " << i;
  }
}

void check_all(torch::Device device, torch::Dtype dtype, double tol) {
  torch::manual_seed(3);
  const std::string where = device.str() + " " + std::string(c10::toString(dtype));
  // 600 rows (three row tiles of 256). Widths: 70 (a partial column tile;
  // one element per access on a GPU) and 264 (16-byte accesses, and a
  // partial block of column packs); head_dim 12 and 16 likewise.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 300}, {1, 1}})
    for (const int64_t w : {int64_t{70}, int64_t{264}}) {
      const int64_t rows = shape[0] * shape[1], head_dim = w == 70 ? 12 : 16;
      const std::string what = where + " rows " + std::to_string(rows) + " width " + std::to_string(w);
      expect_matches(swiglu_fused, swiglu_ref, {torch::randn({shape[0], shape[1], 2 * w}) * 3},
                     torch::randn({shape[0], shape[1], w}), dtype, device, tol, "swiglu " + what);
      expect_matches(gelu_fused, gelu_ref,
                     {torch::randn({shape[0], shape[1], 24}), torch::randn({w, 24}) * 0.3, torch::randn({w})},
                     torch::randn({shape[0], shape[1], w}), dtype, device, tol, "linear_bias_gelu " + what);
      // Output width 24 with w 264: every leading dimension a multiple of 8,
      // so 16-bit GPU runs take cuBLASLt's GELU epilogues; 20 with w 70 not.
      const int64_t c2 = w == 70 ? 20 : 24;
      for (const bool keep : {false, true})
        expect_matches(keep ? gelu_mlp_kept : gelu_mlp_fused, gelu_mlp_ref,
                       {torch::randn({shape[0], shape[1], 24}), torch::randn({w, 24}) * 0.3, torch::randn({w}),
                        torch::randn({c2, w}) * 0.2, torch::randn({c2})},
                       torch::randn({shape[0], shape[1], c2}), dtype, device, tol,
                       std::string(keep ? "gelu_mlp (kept) " : "gelu_mlp ") + what);
      expect_matches(swiglu_linear_fused, swiglu_linear_ref,
                     {torch::randn({shape[0], shape[1], 2 * w}) * 3, torch::randn({20, w}) * 0.2},
                     torch::randn({shape[0], shape[1], 20}), dtype, device, tol, "swiglu_linear " + what);
      expect_matches(layer_norm_fused, layer_norm_ref,
                     {torch::randn({shape[0], shape[1], w}), 1 + 0.1 * torch::randn({w}), 0.1 * torch::randn({w})},
                     torch::randn({shape[0], shape[1], w}), dtype, device, tol, "layer_norm " + what);
      const at::Tensor angles = torch::rand({shape[1], head_dim / 2}) * 6;
      const at::Tensor cos = at::cat({angles.cos(), angles.cos()}, -1), sin = at::cat({angles.sin(), angles.sin()}, -1);
      expect_matches(rotary_fused, rotary_ref, {torch::randn({shape[0], shape[1], 3, head_dim}), cos, sin},
                     torch::randn({shape[0], 3, shape[1], head_dim}), dtype, device, tol, "rotary " + what,
                     /*compared_grads=*/1);  // cos, sin: constants
      const at::Tensor g = torch::randn({rows, w});
      EXPECT_LE(rel_err(nn::bias_grad(g.to(device, dtype)), g.to(dtype).to(torch::kFloat).sum(0)), tol)
          << "bias_grad " << what;
    }
}

// add_layer_norm against x + branch and at::layer_norm, both outputs used.
void check_add_layer_norm(torch::Device device, torch::Dtype dtype, double tol) {
  torch::manual_seed(4);
  for (int64_t rows : {int64_t{1}, int64_t{300}})
    for (int64_t c : {int64_t{96}, int64_t{70}}) {  // 16-byte accesses on a GPU, and one element at a time
      const std::vector<at::Tensor> inputs = {torch::randn({rows, c}), torch::randn({rows, c}),
                                              1 + 0.1 * torch::randn({c}), 0.1 * torch::randn({c})};
      const at::Tensor up_h = torch::randn({rows, c}), up_y = torch::randn({rows, c});
      auto leaves = [&](torch::Dtype t, torch::Device d, bool rounded) {
        std::vector<at::Tensor> out;
        for (const auto& in : inputs)  // fresh leaves: .to() may return `in` itself
          out.push_back((rounded ? in.to(dtype).to(t) : in.to(t)).to(d).detach().clone().requires_grad_(true));
        return out;
      };
      std::vector<at::Tensor> ref = leaves(torch::kFloat, torch::kCPU, true), got = leaves(dtype, device, false);
      const at::Tensor h_ref = ref[0] + ref[1];
      const at::Tensor y_ref = at::layer_norm(h_ref, {c}, ref[2], ref[3], 1e-5);
      ((h_ref * up_h.to(dtype).to(torch::kFloat)).sum() + (y_ref * up_y.to(dtype).to(torch::kFloat)).sum()).backward();
      const auto [h, y] = nn::add_layer_norm(got[0], got[1], got[2], got[3], 1e-5);
      ((h * up_h.to(device, dtype)).sum() + (y * up_y.to(device, dtype)).sum()).backward();
      const std::string what = "add_layer_norm " + device.str() + " " + std::string(c10::toString(dtype)) + " rows " +
                               std::to_string(rows) + " cols " + std::to_string(c);
      EXPECT_LE(rel_err(h, h_ref), tol) << what << ": h";
      EXPECT_LE(rel_err(y, y_ref), tol) << what << ": normed";
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_TRUE(got[i].grad().defined()) << what << ": gradient " << i;
        EXPECT_LE(rel_err(got[i].grad(), ref[i].grad()), tol) << what << ": gradient " << i;
      }
    }
}

}  // namespace

TEST(FusedOps, AddLayerNormMatchesAten) {
  check_add_layer_norm(torch::kCPU, torch::kFloat, 1e-5);
  if (!torch::cuda::is_available()) GTEST_SKIP() << "the GPU kernels need a GPU";
  check_add_layer_norm(torch::kCUDA, torch::kFloat, 1e-5);
  check_add_layer_norm(torch::kCUDA, torch::kBFloat16, 2e-2);
  check_add_layer_norm(torch::kCUDA, torch::kHalf, 1e-2);  // fp16 training runs these kernels too
}

TEST(FusedOps, MatchAtenOnTheCpu) { check_all(torch::kCPU, torch::kFloat, 1e-5); }

TEST(FusedOps, GpuKernelsMatchAten) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  check_all(torch::kCUDA, torch::kFloat, 1e-5);
  check_all(torch::kCUDA, torch::kBFloat16, 2e-2);  // bf16 rounding of stored values
  check_all(torch::kCUDA, torch::kHalf, 1e-2);
  // The bias gradient is deterministic (no atomics), and empty inputs are fine.
  const at::Tensor g = torch::randn({1000, 333}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16));
  EXPECT_TRUE(torch::equal(nn::bias_grad(g), nn::bias_grad(g)));
  const at::Tensor none = torch::zeros({0, 8}, g.options());
  EXPECT_EQ(nn::bias_grad(none).abs().sum().item<double>(), 0.0);
}

#ifdef STRATUM_WITH_CUDA
// What a forward leaves allocated for its backward, in bytes: the MLPs that
// recompute their activation keep the pre-activation only.
TEST(FusedOps, RecomputingMlpsKeepLessForBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const int64_t rows = 512, c = 256, f = 1024, act_bytes = rows * f * 2;
  const auto kept_by = [&](auto forward) {
    forward().sum().backward();  // first: cuBLAS's workspace, the gradients
    torch::cuda::synchronize();
    const auto allocated = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current; };
    const int64_t before = allocated();
    at::Tensor y = forward();
    const int64_t kept = allocated() - before - y.nbytes();
    y.sum().backward();  // still runs, from what it kept
    return kept;
  };
  const at::Tensor x = torch::randn({rows, c}, opts).requires_grad_(true);
  const at::Tensor w1 = (torch::randn({f, c}, opts) * 0.05).requires_grad_(true);
  const at::Tensor w2 = (torch::randn({c, f}, opts) * 0.05).requires_grad_(true);
  const at::Tensor b1 = torch::zeros({f}, opts).requires_grad_(true), b2 = torch::zeros({c}, opts).requires_grad_(true);
  EXPECT_EQ(kept_by([&] { return nn::gelu_mlp(x, w1, b1, w2, b2); }), act_bytes);  // h
  EXPECT_EQ(kept_by([&] { return nn::gelu_mlp(x, w1, b1, w2, b2, /*keep_activation=*/true); }), 2 * act_bytes);
  EXPECT_EQ(kept_by([&] { return nn::linear_bias_gelu(x, w1, b1).matmul(w2.t()); }), 2 * act_bytes);  // h, gelu(h)
  const at::Tensor gate_up = (torch::randn({rows, 2 * f}, opts)).requires_grad_(true);
  EXPECT_EQ(kept_by([&] { return nn::swiglu_linear(gate_up, w2); }), 0);  // gate_up is the caller's
  EXPECT_EQ(kept_by([&] { return nn::swiglu(gate_up).matmul(w2.t()); }), act_bytes);
}

// cuBLASLt's GELU epilogue (16-bit GPU tensors, aligned widths) is GPT-2's
// tanh approximation, not erf's GELU: at pre-activations near -2.5 the two
// differ by 4e-4, thirty times fp16's rounding of the results there.
TEST(FusedOps, GeluEpilogueIsTheTanhApproximation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  torch::manual_seed(6);
  const auto half = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf);
  const at::Tensor x = (torch::randn({256, 64}) * 0.1).to(half), w = (torch::randn({128, 64}) * 0.1).to(half);
  const at::Tensor b = torch::full({128}, -2.5).to(half);
  const at::Tensor y = nn::linear_bias_gelu(x, w, b).to(torch::kFloat).cpu();
  const at::Tensor h = at::linear(x.to(torch::kFloat).cpu(), w.to(torch::kFloat).cpu(), b.to(torch::kFloat).cpu());
  const double off_tanh = (y - at::gelu(h, "tanh")).abs().max().item<double>();
  const double off_erf = (y - at::gelu(h)).abs().max().item<double>();
  EXPECT_LT(off_tanh, 5e-5);
  EXPECT_GT(off_erf, 3e-4);
}
#endif

TEST(FusedOps, BadShapesAreNamed) {
  EXPECT_THROW(nn::swiglu(torch::randn({2, 5})), Error);
  EXPECT_THROW(nn::rotary(torch::randn({1, 2, 3, 5}), torch::randn({3, 5}), torch::randn({3, 5})), Error);
  EXPECT_THROW(nn::linear_bias_gelu(torch::randn({2, 4}), torch::randn({3, 4}), at::Tensor()), Error);
  EXPECT_THROW(nn::bias_grad(torch::randn({2, 3, 4})), Error);
  EXPECT_THROW(nn::gelu_mlp(torch::randn({2, 4}), torch::randn({3, 4}), torch::randn({3}), torch::randn({4, 5}),
                            torch::randn({4})),
               Error);
  EXPECT_THROW(nn::swiglu_linear(torch::randn({2, 6}), torch::randn({4, 2})), Error);
  EXPECT_THROW(nn::layer_norm(torch::randn({2, 4}), torch::ones({5}), torch::zeros({5}), 1e-5), Error);
  EXPECT_THROW(nn::add_layer_norm(torch::randn({2, 4}), torch::randn({2, 5}), torch::ones({4}), torch::zeros({4}), 1e-5),
               Error);
}

// The MLPs run over tiles of tokens (tile_tokens, nn/tiled_rows.h) against
// the same MLPs untiled: output and the gradients of the input and of every
// weight, keeping or recomputing the activation, for tiles that do and do
// not divide the 22 rows, one row, and more than the rows.
namespace {

template <typename Mlp>
void expect_tiling_matches(const std::function<std::shared_ptr<Mlp>()>& make, const std::string& what) {
  torch::manual_seed(8);
  auto untiled = make();
  const at::Tensor x0 = torch::randn({2, 11, 16}), up = torch::randn({2, 11, 16});
  at::Tensor x = x0.clone().requires_grad_(true);
  const at::Tensor want = untiled->forward(x);
  want.backward(up);
  for (int64_t tile : {int64_t{1}, int64_t{5}, int64_t{11}, int64_t{100}}) {
    auto tiled = make();
    tiled->tile_tokens = tile;
    {
      torch::NoGradGuard no_grad;
      auto src = untiled->named_parameters();
      for (auto& p : tiled->named_parameters()) p.value().copy_(src[p.key()]);
    }
    ASSERT_TRUE(tiled->tiled());
    at::Tensor xt = x0.clone().requires_grad_(true);
    const at::Tensor got = tiled->forward(xt);
    got.backward(up);
    const std::string where = what + " tile " + std::to_string(tile);
    EXPECT_LE(rel_err(got, want), 1e-5) << where << ": output";
    EXPECT_LE(rel_err(xt.grad(), x.grad()), 1e-5) << where << ": input gradient";
    auto ref = untiled->named_parameters();
    for (const auto& p : tiled->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << where << ": " << p.key();
      EXPECT_LE(rel_err(p.value().grad(), ref[p.key()].grad()), 1e-5) << where << ": " << p.key();
    }
  }
}

}  // namespace

TEST(TiledMlp, MatchesUntiledGeluMlp) {
  for (const bool recompute : {false, true})
    expect_tiling_matches<nn::GeluMLPImpl>(
        [&] { return std::make_shared<nn::GeluMLPImpl>(16, 40, /*dropout=*/0.0, recompute); },
        std::string("gelu mlp") + (recompute ? " (recomputed)" : ""));
}

TEST(TiledMlp, MatchesUntiledSwiGLUMlp) {
  for (const bool recompute : {false, true})
    expect_tiling_matches<nn::SwiGLUMLPImpl>([&] { return std::make_shared<nn::SwiGLUMLPImpl>(16, 40, recompute); },
                                             std::string("swiglu mlp") + (recompute ? " (recomputed)" : ""));
}

// An input that takes no gradient (the weights' alone), and tiles of a
// function of no parameters (the input's alone).
TEST(TiledMlp, TiledRowsGivesWhatIsAskedFor) {
  torch::manual_seed(9);
  auto mlp = std::make_shared<nn::SwiGLUMLPImpl>(8, 24);
  const at::Tensor x = torch::randn({13, 8});
  mlp->forward(x).sum().backward();
  const at::Tensor want = mlp->down_proj->weight.grad().clone();
  mlp->zero_grad();
  mlp->tile_tokens = 4;
  mlp->forward(x).sum().backward();
  EXPECT_LE(rel_err(mlp->down_proj->weight.grad(), want), 1e-5);
  at::Tensor y = torch::randn({13, 8}).requires_grad_(true);
  nn::tiled_rows([](const at::Tensor& t) { return t * t; }, y, {}, 3).sum().backward();
  EXPECT_LE(rel_err(y.grad(), 2 * y.detach()), 1e-6);
}
