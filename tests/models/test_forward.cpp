// Built models against independent references: exact Hugging Face names,
// parameter counts of real builds, forward of tiny-gpt2 / tiny-llama equal to
// plain ATen ops over the same (HF-layout) weights, causal masking, GQA = MHA
// with repeated k/v weights, RoPE against its formula, initialization
// statistics, and the LayerStack's structure.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>

#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/nn/rope.h"

using namespace stratum;
using namespace stratum::models;

namespace {

using Weights = std::map<std::string, at::Tensor>;

std::vector<std::string> names_of(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.key());
  return out;
}

// Every parameter random (norm weights and biases too), so the reference
// sees whether each one is used, and used the right way.
void randomize(CausalLMImpl& model, int64_t seed) {
  torch::manual_seed(seed);
  c10::AutoGradMode no_grad(false);
  for (auto& p : model.parameters()) p.copy_(torch::randn_like(p) * 0.2);
}

Weights hf_weights(const CausalLMImpl& model) {
  Weights w;
  for (auto& [name, t] : to_hf_state_dict(model)) w[name] = t;
  return w;
}

at::Tensor tokens_for(const ModelConfig& c, int64_t batch, int64_t seq, int64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(c.vocab_size, {batch, seq}, torch::kLong);
}

// softmax(q k^T / sqrt(d) + causal mask) v, with query head h reading k/v head h / (H / KV).
at::Tensor ref_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t H = q.size(1), KV = k.size(1), T = q.size(2), D = q.size(3);
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / KV);
    at::Tensor s = q.select(1, h).matmul(k.select(1, g).transpose(-1, -2)) / std::sqrt(static_cast<double>(D));
    const at::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
    s = s.masked_fill(future, -std::numeric_limits<float>::infinity());
    heads.push_back(torch::softmax(s, -1).matmul(v.select(1, g)));
  }
  return torch::stack(heads, 1);  // [B, H, T, D]
}

at::Tensor to_heads(const at::Tensor& x, int64_t n) {  // [B, T, n*D] -> [B, n, T, D]
  return x.view({x.size(0), x.size(1), n, -1}).permute({0, 2, 1, 3});
}
at::Tensor from_heads(const at::Tensor& x) {  // [B, n, T, D] -> [B, T, n*D]
  return x.permute({0, 2, 1, 3}).reshape({x.size(0), x.size(2), -1});
}

at::Tensor ref_layer_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps) {
  const at::Tensor mean = x.mean(-1, true);
  const at::Tensor var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / torch::sqrt(var + eps) * w + b;
}

at::Tensor ref_gelu_tanh(const at::Tensor& x) {
  return 0.5 * x * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
}

// GPT-2 from HF-layout weights: Conv1D is x @ W + b with W [in, out].
at::Tensor ref_gpt2(const Weights& w, const ModelConfig& c, const at::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  auto conv1d = [&](const at::Tensor& x, const std::string& n) { return x.matmul(w.at(n + ".weight")) + w.at(n + ".bias"); };
  at::Tensor x = w.at("transformer.wte.weight").index({tokens}) + w.at("transformer.wpe.weight").narrow(0, 0, T);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    at::Tensor h = ref_layer_norm(x, w.at(p + "ln_1.weight"), w.at(p + "ln_1.bias"), c.norm_eps);
    const auto qkv = conv1d(h, p + "attn.c_attn").chunk(3, -1);
    const at::Tensor a = from_heads(ref_attention(to_heads(qkv[0], c.heads), to_heads(qkv[1], c.heads), to_heads(qkv[2], c.heads)));
    x = x + conv1d(a, p + "attn.c_proj");
    h = ref_layer_norm(x, w.at(p + "ln_2.weight"), w.at(p + "ln_2.bias"), c.norm_eps);
    x = x + conv1d(ref_gelu_tanh(conv1d(h, p + "mlp.c_fc")), p + "mlp.c_proj");
  }
  x = ref_layer_norm(x, w.at("transformer.ln_f.weight"), w.at("transformer.ln_f.bias"), c.norm_eps);
  const at::Tensor head = c.tie_embeddings ? w.at("transformer.wte.weight") : w.at("lm_head.weight");
  return x.matmul(head.t());
}

at::Tensor ref_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// Rotates pair (i, i + D/2) of every position p by p * theta^(-2i/D), the angles in double.
at::Tensor ref_rope(const at::Tensor& x, double theta) {  // [B, H, T, D]
  const int64_t T = x.size(2), D = x.size(3), half = D / 2;
  at::Tensor cos = torch::empty({T, half}, torch::kDouble), sin = torch::empty({T, half}, torch::kDouble);
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = p * std::pow(theta, -2.0 * i / D);
      cos[p][i] = std::cos(angle);
      sin[p][i] = std::sin(angle);
    }
  cos = cos.to(torch::kFloat);
  sin = sin.to(torch::kFloat);
  const at::Tensor a = x.narrow(-1, 0, half), b = x.narrow(-1, half, half);
  return torch::cat({a * cos - b * sin, b * cos + a * sin}, -1);
}

at::Tensor ref_llama(const Weights& w, const ModelConfig& c, const at::Tensor& tokens) {
  auto linear = [&](const at::Tensor& x, const std::string& n) { return x.matmul(w.at(n + ".weight").t()); };
  at::Tensor x = w.at("model.embed_tokens.weight").index({tokens});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor h = ref_rms_norm(x, w.at(p + "input_layernorm.weight"), c.norm_eps);
    const at::Tensor q = ref_rope(to_heads(linear(h, p + "self_attn.q_proj"), c.heads), c.rope_theta);
    const at::Tensor k = ref_rope(to_heads(linear(h, p + "self_attn.k_proj"), c.kv_heads), c.rope_theta);
    const at::Tensor v = to_heads(linear(h, p + "self_attn.v_proj"), c.kv_heads);
    x = x + linear(from_heads(ref_attention(q, k, v)), p + "self_attn.o_proj");
    h = ref_rms_norm(x, w.at(p + "post_attention_layernorm.weight"), c.norm_eps);
    const at::Tensor gate = linear(h, p + "mlp.gate_proj");
    x = x + linear(gate * torch::sigmoid(gate) * linear(h, p + "mlp.up_proj"), p + "mlp.down_proj");
  }
  x = ref_rms_norm(x, w.at("model.norm.weight"), c.norm_eps);
  const at::Tensor head = c.tie_embeddings ? w.at("model.embed_tokens.weight") : w.at("lm_head.weight");
  return x.matmul(head.t());
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

int64_t numel_sum(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST(Models, Gpt2NamesAreHuggingFaces) {
  auto model = build_model(preset("tiny-gpt2"));
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const char* n : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expected.push_back(p + n);
  }
  expected.push_back("transformer.ln_f.weight");
  expected.push_back("transformer.ln_f.bias");
  EXPECT_EQ(names_of(*model), expected);  // tied: no lm_head.weight parameter
  std::vector<std::string> hf;
  for (auto& [n, t] : to_hf_state_dict(*model)) hf.push_back(n);
  EXPECT_EQ(hf, expected);

  auto untied = build_model(make_model_config("tiny-gpt2", {{"tie_embeddings", "false"}}));
  expected.push_back("lm_head.weight");
  EXPECT_EQ(names_of(*untied), expected);
}

TEST(Models, LlamaNamesAreHuggingFaces) {
  auto model = build_model(make_model_config("tiny-llama", {{"tie_embeddings", "false"}}));
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* n : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      expected.push_back(p + n);
  }
  expected.push_back("model.norm.weight");
  expected.push_back("lm_head.weight");
  EXPECT_EQ(names_of(*model), expected);
  const auto& k = model->named_parameters()["model.layers.0.self_attn.k_proj.weight"];
  EXPECT_EQ(k.sizes(), (std::vector<int64_t>{32, 64}));  // 2 kv heads of 16
}

TEST(Models, RealBuildsCountLikeTheFormula) {
  for (const char* name : {"tiny-gpt2", "tiny-llama", "gpt2-tiny-bytes"}) {
    SCOPED_TRACE(name);
    for (const char* tied : {"true", "false"}) {
      const ModelConfig c = make_model_config(name, {{"tie_embeddings", tied}});
      EXPECT_EQ(numel_sum(*build_model(c)), parameter_count(c));
    }
  }
  // The canonical figure, from a real build (0.5 GB of fp32).
  auto gpt2 = build_model(preset("gpt2-124m"));
  EXPECT_EQ(numel_sum(*gpt2), 124'439'808);
  EXPECT_EQ(gpt2->size(), 15u);  // embedding, 12 blocks, final norm, head
}

TEST(Models, TinyGpt2ForwardEqualsReference) {
  for (const char* tied : {"true", "false"}) {
    SCOPED_TRACE(tied);
    auto model = build_model(make_model_config("tiny-gpt2", {{"tie_embeddings", tied}}));
    randomize(*model, 1);
    const at::Tensor tokens = tokens_for(model->config(), 2, 16, 2);
    const at::Tensor got = model->logits(tokens);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, 16, 256}));
    const at::Tensor want = ref_gpt2(hf_weights(*model), model->config(), tokens);
    EXPECT_LT(max_diff(got, want), 1e-5) << "logits scale " << want.abs().max().item<double>();
  }
}

TEST(Models, TinyLlamaForwardEqualsReference) {
  for (const char* tied : {"true", "false"}) {
    SCOPED_TRACE(tied);
    auto model = build_model(make_model_config("tiny-llama", {{"tie_embeddings", tied}}));
    randomize(*model, 3);
    const at::Tensor tokens = tokens_for(model->config(), 2, 24, 4);
    const at::Tensor got = model->logits(tokens);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, 24, 256}));
    const at::Tensor want = ref_llama(hf_weights(*model), model->config(), tokens);
    EXPECT_LT(max_diff(got, want), 1e-5) << "logits scale " << want.abs().max().item<double>();
  }
}

TEST(Models, LossIsMeanCrossEntropyInFp32) {
  auto model = build_model(preset("tiny-llama"));
  const at::Tensor tokens = tokens_for(model->config(), 2, 8, 5);
  at::Tensor targets = tokens_for(model->config(), 2, 8, 6);
  const at::Tensor logits = model->logits(tokens);
  const at::Tensor want = -torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).mean();
  EXPECT_NEAR(model->forward(tokens, targets).item<double>(), want.item<double>(), 1e-5);
  // bf16 logits give an fp32 loss; -100 targets are ignored.
  EXPECT_EQ(causal_lm_loss(logits.to(torch::kBFloat16), targets).scalar_type(), torch::kFloat);
  targets.index_put_({0}, -100);
  const at::Tensor kept = -torch::log_softmax(logits[1], -1).gather(-1, targets[1].unsqueeze(-1)).mean();
  EXPECT_NEAR(causal_lm_loss(logits, targets).item<double>(), kept.item<double>(), 1e-5);
  EXPECT_THROW(causal_lm_loss(logits, targets.narrow(1, 0, 4)), Error);
}

TEST(Models, FutureTokensDoNotChangeEarlierLogits) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    SCOPED_TRACE(name);
    auto model = build_model(preset(name));
    randomize(*model, 7);
    at::Tensor tokens = tokens_for(model->config(), 1, 20, 8);
    const at::Tensor before = model->logits(tokens);
    tokens[0][12] = (tokens[0][12].item<int64_t>() + 1) % 256;
    const at::Tensor after = model->logits(tokens);
    EXPECT_EQ(max_diff(before.narrow(1, 0, 12), after.narrow(1, 0, 12)), 0.0);
    EXPECT_GT(max_diff(before.narrow(1, 12, 8), after.narrow(1, 12, 8)), 1e-3);
  }
}

// The MLP recomputing its activation in backward computes the same loss and
// gradients as the MLP keeping it (the default).
TEST(Models, RecomputedMlpActivationGivesTheSameGradients) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    SCOPED_TRACE(name);
    auto recomputing = build_model(make_model_config(name, {{"recompute_mlp_activation", "true"}}));
    auto keeping = build_model(preset(name));
    ASSERT_FALSE(keeping->config().recompute_mlp_activation);
    randomize(*recomputing, 11);
    randomize(*keeping, 11);
    const at::Tensor tokens = tokens_for(recomputing->config(), 2, 16, 12);
    const at::Tensor targets = tokens_for(recomputing->config(), 2, 16, 13);
    const at::Tensor loss = recomputing->forward(tokens, targets), kept_loss = keeping->forward(tokens, targets);
    EXPECT_EQ(loss.item<double>(), kept_loss.item<double>());
    loss.backward();
    kept_loss.backward();
    const auto params = recomputing->named_parameters(), kept = keeping->named_parameters();
    ASSERT_EQ(params.size(), kept.size());
    for (const auto& p : params) {
      const at::Tensor& want = kept[p.key()].grad();
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_LE(max_diff(p.value().grad(), want), 1e-6 * std::max(1.0, want.abs().max().item<double>())) << p.key();
    }
  }
}

// The MLP and the LM head with its loss run over tiles of tokens
// (tiled_mlp_tokens, tiled_loss_tokens) against the untiled model: the same
// loss and gradients, tied and untied heads, ignored targets; the logits and
// an evaluation without autograd afterwards as untiled.
TEST(TiledModel, LlamaAndGpt2MatchUntiledLossAndGradients) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"})
    for (const char* tied : {"true", "false"}) {
      SCOPED_TRACE(std::string(name) + " tie_embeddings=" + tied);
      auto untiled = build_model(make_model_config(name, {{"tie_embeddings", tied}}));
      auto tiled = build_model(make_model_config(
          name, {{"tie_embeddings", tied}, {"tiled_mlp_tokens", "5"}, {"tiled_loss_tokens", "7"}}));
      randomize(*untiled, 21);
      randomize(*tiled, 21);
      const at::Tensor tokens = tokens_for(tiled->config(), 2, 16, 22);
      at::Tensor targets = tokens_for(tiled->config(), 2, 16, 23);
      targets[0][3] = -100;
      targets[1][15] = -100;
      const at::Tensor want = untiled->forward(tokens, targets), got = tiled->forward(tokens, targets);
      EXPECT_EQ(got.dim(), 0);
      EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5 * std::abs(want.item<double>()));
      want.backward();
      got.backward();
      const auto params = tiled->named_parameters(), ref = untiled->named_parameters();
      ASSERT_EQ(params.size(), ref.size());
      for (const auto& p : params) {
        const at::Tensor& w = ref[p.key()].grad();
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_LE(max_diff(p.value().grad(), w), 1e-5 * std::max(1e-3, w.abs().max().item<double>())) << p.key();
      }
      // The head's weight gradient comes back through autograd: not fusable.
      EXPECT_FALSE(tiled->layer(tiled->size() - 1).linear_weights_fusable());
      EXPECT_LE(max_diff(tiled->logits(tokens), untiled->logits(tokens)), 1e-5);
      c10::AutoGradMode no_grad(false);
      EXPECT_NEAR(tiled->forward(tokens, targets).item<double>(), want.item<double>(),
                  1e-5 * std::abs(want.item<double>()));
      EXPECT_EQ(tiled->logits(tokens).dim(), 3);
      // A pipeline's last stage: given the targets, the stack's output is the
      // tiled loss itself, which loss() passes through; without them, logits.
      tiled->set_stage_targets(targets);
      const at::Tensor staged = tiled->run(tokens, 0, tiled->size());
      EXPECT_EQ(staged.dim(), 0);
      EXPECT_NEAR(tiled->loss(staged, targets).item<double>(), want.item<double>(),
                  1e-5 * std::abs(want.item<double>()));
      tiled->set_stage_targets({});
      EXPECT_EQ(tiled->run(tokens, 0, tiled->size()).dim(), 3);
    }
}

TEST(Models, GroupedQueryAttentionEqualsMhaWithRepeatedKv) {
  auto gqa = build_model(preset("tiny-llama"));  // 4 heads, 2 kv heads
  auto mha = build_model(make_model_config("tiny-llama", {{"kv_heads", "4"}}));
  randomize(*gqa, 9);
  {
    c10::AutoGradMode no_grad(false);
    auto src = gqa->named_parameters();
    for (auto& p : mha->named_parameters()) {
      at::Tensor w = src[p.key()];
      if (p.key().find("k_proj") != std::string::npos || p.key().find("v_proj") != std::string::npos)
        w = w.view({2, 16, 64}).repeat_interleave(2, 0).reshape({64, 64});  // kv head g serves query heads 2g, 2g+1
      p.value().copy_(w);
    }
  }
  const at::Tensor tokens = tokens_for(gqa->config(), 2, 16, 10);
  EXPECT_LT(max_diff(gqa->logits(tokens), mha->logits(tokens)), 1e-5);
}

TEST(Models, RopeMatchesItsFormula) {
  nn::RotaryEmbedding rope(8, 10000.0);
  auto [cos, sin] = rope.cos_sin(6, torch::kCPU, torch::kFloat);
  ASSERT_EQ(cos.sizes(), (std::vector<int64_t>{6, 8}));
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t i = 0; i < 8; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * (i % 4) / 8);
      EXPECT_NEAR(cos[p][i].item<double>(), std::cos(angle), 1e-6);
      EXPECT_NEAR(sin[p][i].item<double>(), std::sin(angle), 1e-6);
    }
  torch::manual_seed(11);
  const at::Tensor x = torch::randn({1, 2, 6, 8});
  EXPECT_LT(max_diff(nn::apply_rotary(x, cos, sin), ref_rope(x, 10000.0)), 1e-6);
  // The point of RoPE: <R(p) q, R(s) k> depends on p - s only.
  const at::Tensor q = torch::randn({8}), k = torch::randn({8});
  auto at_pos = [&](const at::Tensor& v, int64_t p) {
    return nn::apply_rotary(v.view({1, 8}), cos.narrow(0, p, 1), sin.narrow(0, p, 1)).view({8});
  };
  EXPECT_NEAR(at_pos(q, 3).dot(at_pos(k, 1)).item<double>(), at_pos(q, 5).dot(at_pos(k, 3)).item<double>(), 1e-5);
  // A longer request extends the cache; a shorter one is its prefix.
  auto [cos10, sin10] = rope.cos_sin(10, torch::kCPU, torch::kFloat);
  EXPECT_TRUE(torch::equal(cos10.narrow(0, 0, 6), cos));
  EXPECT_THROW(nn::RotaryEmbedding(7, 10000.0), Error);
}

TEST(Models, Llama3RopeScalingMatchesItsFormula) {
  // HF's _compute_llama3_parameters, in double: long wavelengths / factor,
  // short ones kept, the band between interpolated.
  const double theta = 10000, factor = 8, low = 1, high = 4, original = 64;
  nn::RopeScaling s;
  s.factor = factor;
  s.low_freq_factor = low;
  s.high_freq_factor = high;
  s.original_max_seq_len = 64;
  const at::Tensor got = nn::RotaryEmbedding(16, theta, s).inverse_frequencies(torch::kCPU);
  int kept = 0, stretched = 0, blended = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const double f = std::pow(theta, -2.0 * i / 16), wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > original / low) {
      want = f / factor;
      ++stretched;
    } else if (wavelen >= original / high) {
      const double smooth = (original / wavelen - low) / (high - low);
      want = (1 - smooth) * f / factor + smooth * f;
      ++blended;
    } else {
      ++kept;
    }
    EXPECT_NEAR(got[i].item<double>(), want, 1e-6 * f) << i;
  }
  EXPECT_GT(kept, 0);  // the test covers all three bands
  EXPECT_GT(stretched, 0);
  EXPECT_GT(blended, 0);
  // Unscaled RoPE is left alone.
  EXPECT_TRUE(torch::allclose(nn::RotaryEmbedding(16, theta).inverse_frequencies(torch::kCPU),
                              torch::pow(theta, -torch::arange(0, 16, 2, torch::kDouble) / 16).to(torch::kFloat)));
}

TEST(Models, InitFollowsGpt2) {
  torch::manual_seed(12);
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    SCOPED_TRACE(name);
    auto model = build_model(make_model_config(name, {{"hidden", "256"}, {"layers", "8"}, {"ffn_hidden", "512"}}));
    const double residual = 0.02 / std::sqrt(16.0);
    for (const auto& p : model->named_parameters()) {
      const std::string& n = p.key();
      const at::Tensor& t = p.value();
      SCOPED_TRACE(n);
      const bool proj = n.find("c_proj.weight") != std::string::npos || n.find("o_proj.weight") != std::string::npos ||
                        n.find("down_proj.weight") != std::string::npos;
      if (n.find(".bias") != std::string::npos) {
        EXPECT_EQ(t.abs().max().item<double>(), 0.0);
      } else if (t.dim() == 1) {
        EXPECT_TRUE(torch::equal(t, torch::ones_like(t)));
      } else {
        const double want = proj ? residual : 0.02;
        EXPECT_NEAR(t.std().item<double>(), want, 0.03 * want);
        EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.1 * want);
      }
    }
  }
}

TEST(LayerStack, LayersPathsAndRanges) {
  auto model = build_model(make_model_config("tiny-gpt2", {{"layers", "3"}}));
  ASSERT_EQ(model->size(), 6u);
  EXPECT_EQ(model->layer(0).name(), "GPT2Embedding");
  EXPECT_EQ(model->layer(1).name(), "GPT2Block");
  EXPECT_EQ(model->layer(4).name(), "GPT2FinalNorm");
  EXPECT_EQ(model->layer(5).name(), "LMHead");
  EXPECT_EQ(model->layer_path(0), "transformer");
  EXPECT_EQ(model->layer_path(3), "transformer.h.2");
  EXPECT_EQ(model->layer_path(5), "");
  // A block's own parameters, for a per-layer gather; the tied head borrows wte.
  EXPECT_EQ(model->layer(2).parameters().size(), 12u);
  EXPECT_TRUE(model->layer(5).parameters().empty());
  ASSERT_EQ(model->layer(5).borrowed_parameters().size(), 1u);
  EXPECT_TRUE(model->layer(5).borrowed_parameters()[0].is_same(
      model->named_parameters()["transformer.wte.weight"]));
  // Stages run in sequence equal the whole forward.
  randomize(*model, 13);
  const at::Tensor tokens = tokens_for(model->config(), 2, 8, 14);
  const at::Tensor mid = model->run(tokens, 0, 3);
  EXPECT_TRUE(torch::equal(model->run(mid, 3, 6), model->logits(tokens)));
  EXPECT_THROW(model->run(tokens, 4, 7), Error);
  // The training flag reaches layers (dropout lives in them).
  model->eval();
  for (size_t i = 0; i < model->size(); ++i) EXPECT_FALSE(model->layer(i).is_training());
  model->train();
  for (size_t i = 0; i < model->size(); ++i) EXPECT_TRUE(model->layer(i).is_training());
}

namespace {
struct LayerWithOwnParameter : nn::StackLayer {
  LayerWithOwnParameter() : StackLayer("Bad") { register_parameter("w", torch::ones({2})); }
  at::Tensor forward(const at::Tensor& x) override { return x; }
};
struct IdentityLayer : nn::StackLayer {
  IdentityLayer() : StackLayer("Identity") { register_module("lin", torch::nn::Linear(2, 2)); }
  at::Tensor forward(const at::Tensor& x) override { return x; }
};
}  // namespace

TEST(LayerStack, RefusesOwnParametersAndTakenNames) {
  nn::LayerStackImpl stack;
  EXPECT_THROW(stack.append(std::make_shared<LayerWithOwnParameter>(), "a"), Error);
  stack.append(std::make_shared<IdentityLayer>(), "a.b");
  EXPECT_THROW(stack.append(std::make_shared<IdentityLayer>(), "a.b"), Error);
  stack.append(std::make_shared<IdentityLayer>(), "a.c");
  std::vector<std::string> expected = {"a.b.lin.weight", "a.b.lin.bias", "a.c.lin.weight", "a.c.lin.bias"};
  EXPECT_EQ(names_of(stack), expected);
}

TEST(Models, SequenceLongerThanMaxIsAnError) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    auto model = build_model(preset(name));
    try {
      model->logits(torch::zeros({1, 65}, torch::kLong));
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("longer than max_seq_len 64"), std::string::npos) << e.what();
    }
  }
}
