#pragma once
// A GPT-2-shaped decoder (pre-LayerNorm, causal SDPA, tanh-GELU MLP, tied
// embeddings) for engine benchmarks, until the built-in models of models/
// exist. gpt2-350m: 24 layers, 1024 hidden, 16 heads, vocab 50304.
#include <torch/torch.h>

namespace stratum::bench {

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t d, int64_t heads) : heads(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    qkv = register_module("qkv", torch::nn::Linear(d, 3 * d));
    proj = register_module("proj", torch::nn::Linear(d, d));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    fc = register_module("fc", torch::nn::Linear(d, 4 * d));
    out = register_module("out", torch::nn::Linear(4 * d, d));
  }
  at::Tensor forward(at::Tensor x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    auto parts = qkv(ln1(x)).view({B, T, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
    at::Tensor y = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
    x = x + proj(y.transpose(1, 2).reshape({B, T, C}));
    return x + out(torch::gelu(fc(ln2(x)), "tanh"));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl(int64_t vocab, int64_t seq, int64_t d, int64_t layers, int64_t heads) {
    wte = register_module("wte", torch::nn::Embedding(vocab, d));
    wpe = register_module("wpe", torch::nn::Embedding(seq, d));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) blocks->push_back(Block(d, heads));
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  }
  // Mean cross-entropy of next-token prediction.
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& targets) {
    at::Tensor pos = torch::arange(tokens.size(1), tokens.options());
    at::Tensor x = wte(tokens) + wpe(pos);
    for (auto& b : *blocks) x = b->as<BlockImpl>()->forward(x);
    at::Tensor logits = torch::matmul(lnf(x), wte->weight.t());  // tied embeddings
    return torch::cross_entropy_loss(logits.view({-1, logits.size(-1)}), targets.reshape(-1)).to(torch::kFloat);
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm lnf{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace stratum::bench
