// The models' attention layouts stay eligible for cuDNN's fused attention,
// which torch 2.11 with cuDNN 9.19 picks first on the H200 and which runs
// forward + backward 1.5-1.9x faster there than FlashAttention-2
// (bench/attention_backends.py): GPT-2's q/k/v as strided views of one fused
// projection, LLaMA's grouped k/v heads. On a GPU, with cuDNN put first, each
// layout must take it and match the fp32 CPU reference, values and gradients;
// fp32 (no cuDNN kernel) must fall through to another.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include <ATen/Context.h>
#include <torch/torch.h>

#include "stratum/nn/attention.h"
#include "stratum/nn/context_parallel/context_split.h"

using namespace stratum;

namespace {

// Restores ATen's order when a test ends, so tests do not leak it.
struct OrderGuard {
  std::vector<int64_t> saved;
  OrderGuard() {
    for (at::SDPBackend b : at::globalContext().sDPPriorityOrder()) saved.push_back(static_cast<int64_t>(b));
  }
  ~OrderGuard() { at::globalContext().setSDPPriorityOrder(saved); }
};

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(torch::kFloat).cpu(), w = want.to(torch::kFloat).cpu();
  return (g - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-12);
}

struct Layout {
  const char* name;
  int64_t heads, kv_heads, head_dim;
  bool fused_qkv;  // GPT-2: q, k, v are views of one [B, T, 3 * H * D] projection
};

struct Attended {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

// Attention over leaves made from `inputs` in `dtype` on `device`; the output
// goes back to [B, T, H * D] as the models do, so its gradient arrives strided.
Attended attend(const Layout& l, const std::vector<at::Tensor>& inputs, const at::Tensor& upstream, torch::Dtype dtype,
           torch::Device device, int64_t* chosen = nullptr) {
  std::vector<at::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.to(device, dtype).detach().requires_grad_(true));
  const int64_t B = upstream.size(0), T = upstream.size(1), D = l.head_dim;
  auto heads_of = [&](const at::Tensor& x, int64_t n) { return x.view({B, T, n, D}).transpose(1, 2); };
  at::Tensor q, k, v;
  if (l.fused_qkv) {
    const auto parts = leaves[0].split(l.heads * D, -1);
    q = heads_of(parts[0], l.heads), k = heads_of(parts[1], l.heads), v = heads_of(parts[2], l.heads);
  } else {
    q = leaves[0], k = leaves[1], v = leaves[2];
  }
  if (chosen)
    *chosen = at::_fused_sdp_choice(q, k, v, /*attn_mask=*/{}, 0.0, /*is_causal=*/true, std::nullopt,
                                    /*enable_gqa=*/l.heads != l.kv_heads);
  const at::Tensor y = nn::causal_attention(q, k, v, 0.0).transpose(1, 2).reshape({B, T, l.heads * D});
  y.backward(upstream.to(device, dtype));
  Attended r{y.detach()};
  for (const auto& leaf : leaves) r.grads.push_back(leaf.grad());
  return r;
}

}  // namespace

TEST(Attention, CudnnRunsTheModelsLayoutsOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  OrderGuard restore;
  const auto id = [](at::SDPBackend b) { return static_cast<int64_t>(b); };
  at::globalContext().setSDPPriorityOrder(
      {id(at::SDPBackend::cudnn_attention), id(at::SDPBackend::flash_attention),
       id(at::SDPBackend::efficient_attention), id(at::SDPBackend::math), id(at::SDPBackend::overrideable)});
  torch::manual_seed(0);
  const int64_t B = 2, T = 200;  // T not a multiple of the kernels' tiles
  for (const Layout& l : {Layout{"gpt2 D=64", 4, 4, 64, true}, Layout{"gpt2 D=128", 2, 2, 128, true},
                          Layout{"llama GQA", 8, 2, 64, false}}) {
    std::vector<at::Tensor> inputs;
    if (l.fused_qkv) {
      inputs = {torch::randn({B, T, 3 * l.heads * l.head_dim})};
    } else {
      inputs = {torch::randn({B, l.heads, T, l.head_dim}), torch::randn({B, l.kv_heads, T, l.head_dim}),
                torch::randn({B, l.kv_heads, T, l.head_dim})};
    }
    const at::Tensor upstream = torch::randn({B, T, l.heads * l.head_dim});
    const Attended ref = attend(l, inputs, upstream, torch::kFloat, torch::kCPU);
    for (auto [dtype, tol] : {std::pair{torch::kBFloat16, 3e-2}, std::pair{torch::kHalf, 1e-2}}) {
      int64_t chosen = -1;
      const Attended got = attend(l, inputs, upstream, dtype, torch::kCUDA, &chosen);
      const std::string what = std::string(l.name) + " " + c10::toString(dtype);
      EXPECT_EQ(chosen, static_cast<int64_t>(at::SDPBackend::cudnn_attention)) << what << ": cuDNN not taken";
      EXPECT_LE(rel_err(got.out, ref.out), tol) << what;
      for (size_t i = 0; i < ref.grads.size(); ++i) EXPECT_LE(rel_err(got.grads[i], ref.grads[i]), tol) << what << " grad " << i;
    }
    // fp32 has no cuDNN kernel: ATen falls through to the next backend.
    int64_t chosen = -1;
    const Attended fp32 = attend(l, inputs, upstream, torch::kFloat, torch::kCUDA, &chosen);
    EXPECT_NE(chosen, static_cast<int64_t>(at::SDPBackend::cudnn_attention)) << l.name;
    EXPECT_LE(rel_err(fp32.out, ref.out), 1e-3) << l.name;
  }
}

// Which tokens a context-parallel rank holds (nn/context_parallel/context_split.h):
// every position exactly once over the group; the zigzag pairs chunk i with
// chunk 2r - 1 - i, so that every ring rank's causal work is the same; a
// Ulysses group's ranks hold consecutive parts of their ring rank's pair;
// a length that does not split is named with the multiple it needs.
TEST(ContextSplit, EveryPositionOnceZigzagBalanced) {
  using stratum::nn::cp::ContextSplit;
  for (const ContextSplit split : {ContextSplit{2, 1}, ContextSplit{4, 1}, ContextSplit{4, 4}, ContextSplit{8, 2}}) {
    const int64_t length = 64;
    std::vector<int> seen(length, 0);
    std::vector<int64_t> work;  // causal pairs (query, earlier key) a ring rank's queries meet
    for (int64_t r = 0; r < split.size; ++r)
      for (int64_t p : stratum::nn::cp::rank_positions(length, split, r)) ++seen[static_cast<size_t>(p)];
    EXPECT_EQ(seen, std::vector<int>(length, 1)) << split.size << " / " << split.ulysses;
    for (int64_t ring = 0; ring < split.ring(); ++ring) {
      int64_t pairs = 0;
      for (int64_t p : stratum::nn::cp::ring_positions(length, split, ring)) pairs += p + 1;
      work.push_back(pairs);
    }
    EXPECT_EQ(std::set<int64_t>(work.begin(), work.end()).size(), 1u) << "unbalanced ring of " << split.ring();
  }
  // Ring rank 1 of 2 over 8 tokens: chunks 1 and 2 of 4; its two Ulysses ranks each take half in order.
  EXPECT_EQ(stratum::nn::cp::ring_positions(8, {2, 1}, 1), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(stratum::nn::cp::rank_positions(8, {4, 2}, 3), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(stratum::nn::cp::rank_positions(8, {2, 2}, 1), (std::vector<int64_t>{4, 5, 6, 7}));  // Ulysses alone
  EXPECT_NE(stratum::nn::cp::split_problem(30, {2, 1}).find("use a length that is a multiple of 4"), std::string::npos);
  EXPECT_NE(stratum::nn::cp::split_problem(30, {4, 4}).find("a multiple of 4"), std::string::npos);
  EXPECT_EQ(stratum::nn::cp::split_problem(32, {8, 2}), "");
}
