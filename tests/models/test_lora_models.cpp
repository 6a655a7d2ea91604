// LoRA on the built-in models against the dense model it equals: with every
// adapter's B nonzero, the adapted model's logits equal those of the same
// model whose weights are W + scale·B·A (peft's merge), and the adapters'
// gradients equal the chain rule through the merged weights' gradients
// (dB = scale·G·Aᵀ, dA = scale·Bᵀ·G), within 1e-9 (relative; float64), for GPT-2
// (c_attn, c_proj, c_fc: fused attention and MLP), LLaMA (all seven
// projections: stacked q/k/v, gate/up) and the mixtures of experts Mixtral and
// Qwen3-MoE (their experts' projections too). The base gets no gradient. Also the
// adapters' tensor-parallel specs and every refusal by name.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "../common/error_of.h"
#include "stratum/config/config.h"
#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/lora.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/nn/deferred_init.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/quant/nf4.h"

using namespace stratum;
using namespace stratum::models;

namespace {

config::LoraConfig lora_config(std::vector<std::string> targets, int64_t r = 4, double alpha = 8, bool rslora = false) {
  config::LoraConfig l;
  l.enabled = true;
  l.r = r;
  l.lora_alpha = alpha;
  l.use_rslora = rslora;
  l.target_modules = std::move(targets);
  return l;
}

ModelConfig tiny(const std::string& arch) {
  const std::string preset = arch == "gpt2"       ? "tiny-gpt2"
                             : arch == "mixtral"   ? "tiny-mixtral"
                             : arch == "qwen3_moe" ? "tiny-qwen3-moe"
                                                   : "tiny-llama";
  return make_model_config(preset,
                           {{"layers", "2"}, {"max_seq_len", "16"}, {"vocab_size", "96"}, {"tie_embeddings", "false"}});
}

std::shared_ptr<CausalLMImpl> built(const std::string& arch) {
  torch::manual_seed(3);
  auto model = build_model(tiny(arch));
  model->eval();
  return model;
}

// The model's adapted layers by path.
std::map<std::string, nn::LinearImpl*> adapted_layers(CausalLMImpl& model) {
  std::map<std::string, nn::LinearImpl*> out;
  for (const auto& item : model.named_modules("", false))
    if (auto* l = dynamic_cast<nn::LinearImpl*>(item.value().get()); l && l->has_lora()) out[item.key()] = l;
  return out;
}

struct Case {
  std::string arch;
  std::vector<std::string> targets;
  bool rslora;
  size_t layers_adapted;
};

void expect_matches_merged(const Case& c) {
  SCOPED_TRACE(c.arch);
  auto model = built(c.arch);
  const auto paths = apply_lora(*model, lora_config(c.targets, 4, 8, c.rslora));
  ASSERT_EQ(paths.size(), c.layers_adapted);
  auto layers = adapted_layers(*model);
  ASSERT_EQ(layers.size(), c.layers_adapted);
  // In float64 the two orders of summation agree to rounding far below the
  // bound, so the bound tests the math, not fp32's accumulated rounding.
  model->to(torch::kDouble);
  torch::manual_seed(11);
  {
    c10::AutoGradMode no_grad(false);
    for (auto& [path, l] : layers) l->lora_B->weight.copy_(torch::randn_like(l->lora_B->weight) * 0.3);
  }
  // The merged dense model: the same weights plus scale·B·A, no adapters.
  auto merged = built(c.arch);
  merged->to(torch::kDouble);
  std::map<std::string, at::Tensor> merged_params;
  for (auto& item : merged->named_parameters()) merged_params[item.key()] = item.value();
  {
    c10::AutoGradMode no_grad(false);
    for (auto& [path, l] : layers)
      merged_params.at(path + ".weight").add_(l->lora_scale * l->lora_B->weight.mm(l->lora_A->weight));
  }
  const at::Tensor tokens = (torch::arange(2 * 12, torch::kLong) * 7 % 96).reshape({2, 12});
  const at::Tensor targets = (torch::arange(2 * 12, torch::kLong) * 5 % 96).reshape({2, 12});
  const at::Tensor loss = model->forward(tokens, targets);
  const at::Tensor merged_loss = merged->forward(tokens, targets);
  EXPECT_NEAR(loss.item<double>(), merged_loss.item<double>(), 1e-6);  // the loss is taken in fp32
  const at::Tensor want = merged->logits(tokens);
  EXPECT_LT((model->logits(tokens) - want).abs().max().item<double>(), 1e-9 * want.abs().max().item<double>());
  loss.backward();
  merged_loss.backward();
  for (auto& item : model->named_parameters())
    if (!is_lora_parameter(item.key())) {
      EXPECT_FALSE(item.value().requires_grad()) << item.key();
      EXPECT_FALSE(item.value().grad().defined()) << item.key();
    }
  for (auto& [path, l] : layers) {
    const at::Tensor g = merged_params.at(path + ".weight").grad();
    const at::Tensor dB = l->lora_scale * g.mm(l->lora_A->weight.t());
    const at::Tensor dA = l->lora_scale * l->lora_B->weight.t().mm(g);
    EXPECT_LT((l->lora_B->weight.grad() - dB).abs().max().item<double>(), 1e-6 * (1 + dB.abs().max().item<double>()))
        << path;
    EXPECT_LT((l->lora_A->weight.grad() - dA).abs().max().item<double>(), 1e-6 * (1 + dA.abs().max().item<double>()))
        << path;
  }
}

}  // namespace

TEST(LoraModel, Gpt2AdaptersMatchTheMergedDenseModel) {
  expect_matches_merged({"gpt2", {"c_attn", "c_proj", "c_fc"}, false, 8});  // c_proj: attn's and mlp's
}

TEST(LoraModel, LlamaAllLinearWithRsLoraMatchesTheMergedDenseModel) {
  expect_matches_merged({"llama", {"all-linear"}, true, 14});
}

TEST(LoraModel, LlamaSomeProjectionsMatchTheMergedDenseModel) {
  // k without q and v (the stacked GEMM's middle part), up without gate, down.
  expect_matches_merged({"llama", {"k_proj", "up_proj", "down_proj"}, false, 6});
}

// A mixture of experts: attention and every expert's projections (Mixtral's
// w1/w3/w2 on 4 experts; Qwen3-MoE's gate/up/down on 8 by all-linear, the
// router left alone), each expert's adapters through its own GEMMs.
TEST(LoraModel, MixtralExpertsMatchTheMergedDenseModel) {
  expect_matches_merged({"mixtral", {"q_proj", "w1", "w3", "w2"}, false, 2 * (1 + 4 * 3)});
}

TEST(LoraModel, Qwen3MoeAllLinearMatchesTheMergedDenseModel) {
  expect_matches_merged({"qwen3_moe", {"all-linear"}, false, 2 * (4 + 8 * 3)});
}

TEST(LoraModel, AdaptersStartAtZeroAndAreDrawnByName) {
  auto a = built("llama");
  const at::Tensor before = a->logits(torch::arange(8, torch::kLong).reshape({1, 8}));
  apply_lora(*a, lora_config({"q_proj", "v_proj"}));
  EXPECT_TRUE(at::equal(a->logits(torch::arange(8, torch::kLong).reshape({1, 8})), before));
  // A skeleton draws the same adapters as a materialized model (by name, not by draw order).
  torch::manual_seed(3);
  auto skeleton = construct_model(tiny("llama"), {}, c10::kMeta);
  apply_lora(*skeleton, lora_config({"q_proj", "v_proj"}));
  nn::materialize(*skeleton, c10::kCPU, at::kFloat);
  const auto want = a->named_parameters();
  size_t adapters = 0;
  for (const auto& item : skeleton->named_parameters()) {
    EXPECT_TRUE(at::equal(item.value(), *want.find(item.key()))) << item.key();
    adapters += is_lora_parameter(item.key());
  }
  EXPECT_EQ(adapters, 8u);  // q and v of 2 layers, A and B each
  // peft's A: U(-1/sqrt(in), 1/sqrt(in)).
  const at::Tensor A = *want.find("model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(A.sizes(), (at::IntArrayRef{4, 64}));
  EXPECT_LE(A.abs().max().item<double>(), 1.0 / 8.0);
  EXPECT_GT(A.abs().max().item<double>(), 0.1);
}

TEST(LoraModel, ModulesToSaveTrainWholeAndTheRestIsFrozen) {
  auto model = built("llama");
  auto l = lora_config({"q_proj"});
  l.modules_to_save = {"lm_head", "norm"};
  apply_lora(*model, l);
  std::vector<std::string> trained;
  for (const auto& item : model->named_parameters())
    if (item.value().requires_grad()) trained.push_back(item.key());
  EXPECT_EQ(trained, (std::vector<std::string>{
                         "model.layers.0.self_attn.q_proj.lora_A.weight", "model.layers.0.self_attn.q_proj.lora_B.weight",
                         "model.layers.1.self_attn.q_proj.lora_A.weight", "model.layers.1.self_attn.q_proj.lora_B.weight",
                         "model.norm.weight", "lm_head.weight"}));
}

TEST(LoraModel, TensorParallelSpecsSplitAdaptersAsTheirLayers) {
  const ModelConfig c = tiny("llama");  // 4 heads, 2 key/value heads
  auto spec = [&](const std::string& name, int64_t t = 2, int64_t r = 1) { return shard_spec(c, name, t, r); };
  // Column parallel: B by rows as the weight, A whole.
  EXPECT_FALSE(spec("model.layers.0.self_attn.q_proj.lora_A.weight"));
  ASSERT_TRUE(spec("model.layers.0.self_attn.q_proj.lora_B.weight"));
  EXPECT_EQ(spec("model.layers.0.self_attn.q_proj.lora_B.weight")->dim, 0);
  EXPECT_EQ(spec("model.layers.0.mlp.up_proj.lora_B.weight")->parts, 2);
  // Key/value heads shared by pairs of ranks at TP 4: B as the weight, 2 parts.
  EXPECT_EQ(spec("model.layers.0.self_attn.k_proj.lora_B.weight", 4, 3)->parts, 2);
  EXPECT_EQ(spec("model.layers.0.self_attn.k_proj.lora_B.weight", 4, 3)->index, 1);
  // Row parallel: A by columns, B whole.
  ASSERT_TRUE(spec("model.layers.0.self_attn.o_proj.lora_A.weight"));
  EXPECT_EQ(spec("model.layers.0.self_attn.o_proj.lora_A.weight")->dim, 1);
  EXPECT_FALSE(spec("model.layers.0.mlp.down_proj.lora_B.weight"));
  // GPT-2's packed q, k, v: B cut as c_attn's three blocks.
  EXPECT_EQ(shard_spec(tiny("gpt2"), "transformer.h.0.attn.c_attn.lora_B.weight", 2, 0)->blocks, 3);
}

TEST(LoraModel, BadTargetsAreNamed) {
  auto refused = [](const std::string& arch, config::LoraConfig l) {
    auto model = built(arch);
    return test::error_of([&] { apply_lora(*model, l); });
  };
  EXPECT_NE(refused("llama", lora_config({"q_proj", "qkv_proj"})).find("'qkv_proj' names no module of model 'tiny-llama' "
                                                                       "(its linear layers: q_proj, k_proj"),
            std::string::npos);
  EXPECT_NE(refused("llama", lora_config({"lm_head"})).find("'lm_head' is not a linear layer LoRA adapts"),
            std::string::npos);
  EXPECT_NE(refused("gpt2", lora_config({"ln_1"})).find("list a module in lora.modules_to_save"), std::string::npos);
  auto l = lora_config({"c_attn"});
  l.modules_to_save = {"score"};
  EXPECT_NE(refused("gpt2", l).find("lora.modules_to_save: 'score' names no module"), std::string::npos);
  // Tied head: no weight of its own.
  torch::manual_seed(3);
  auto tied = build_model(make_model_config("tiny-llama", {{"layers", "1"}, {"tie_embeddings", "true"}}));
  l = lora_config({"q_proj"});
  l.modules_to_save = {"lm_head"};
  EXPECT_NE(test::error_of([&] { apply_lora(*tied, l); }).find("tied to the token embedding"), std::string::npos);
}

TEST(LoraConfigSection, PeftKeysAreReadAndBadValuesNamed) {
  const Config c = Config::from_string(R"({"train_batch_size": 4, "lora": {"r": 16, "lora_alpha": 32,
      "lora_dropout": 0.05, "target_modules": ["q_proj", "v_proj"], "use_rslora": true, "bias": "none",
      "task_type": "CAUSAL_LM", "modules_to_save": ["lm_head"]}})");
  EXPECT_TRUE(c.lora.enabled);
  EXPECT_EQ(c.lora.r, 16);
  EXPECT_EQ(c.lora.lora_alpha, 32);
  EXPECT_EQ(c.lora.lora_dropout, 0.05);
  EXPECT_EQ(c.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_TRUE(c.lora.use_rslora);
  EXPECT_EQ(c.lora.modules_to_save, (std::vector<std::string>{"lm_head"}));
  EXPECT_DOUBLE_EQ(nn::lora_scale(16, 32, true), 8.0);
  auto refused = [](const std::string& lora) {
    return test::error_of([&] { Config::from_string(R"({"train_batch_size": 4, "lora": )" + lora + "}"); });
  };
  EXPECT_NE(refused(R"({"r": 0})").find("lora.r"), std::string::npos);
  EXPECT_NE(refused(R"({"target_modules": ".*proj"})").find("regular expression"), std::string::npos);
  EXPECT_NE(refused(R"({"use_dora": true})").find("lora.use_dora: peft option not supported"), std::string::npos);
  EXPECT_NE(refused(R"({"bias": "all"})").find("lora.bias"), std::string::npos);
  EXPECT_NE(refused(R"({"lora_dropout": 1})").find("lora.lora_dropout"), std::string::npos);
  EXPECT_NE(refused(R"({"rank": 8})").find("lora.rank"), std::string::npos);
  // stratum-config check knows the layers LoRA adapts before it knows the model.
  EXPECT_NE(refused(R"({"target_modules": ["q_proj", "qkv_proj"]})").find("lora.target_modules[1]: 'qkv_proj' is not a linear layer"),
            std::string::npos);
  EXPECT_NE(refused(R"({"target_modules": ["lm_head"]})").find("modules_to_save"), std::string::npos);
  EXPECT_NE(refused(R"({"base_dtype": "bf16"})").find("training runs in fp32"), std::string::npos);
  EXPECT_NE(refused(R"({"base_dtype": "int8"})").find("lora.base_dtype"), std::string::npos);
}

TEST(LoraModel, Nf4BaseEqualsTheDenseBaseItDequantizesTo) {
  // QLoRA: every block linear in NF4, adapted or not; the model equals the
  // same LoRA model over the dense weights dequantize(quantize(W)): exactly
  // (the same fp32 GEMMs) forward, adapter gradients within 1e-6.
  auto l = lora_config({"q_proj", "down_proj"});
  auto dense = built("llama");
  {
    c10::AutoGradMode no_grad(false);
    for (const auto& item : dense->named_modules("", false))
      if (auto* lin = dynamic_cast<nn::LinearImpl*>(item.value().get()); lin && item.key() != "lm_head")
        lin->weight.copy_(quant::dequantize_nf4(quant::quantize_nf4(lin->weight)));
  }
  apply_lora(*dense, l);
  auto nf4 = built("llama");
  l.base_dtype = config::LoraBaseDType::nf4;
  apply_lora(*nf4, l);
  int64_t held = 0, nf4_layers = 0;
  for (const auto& item : nf4->named_modules("", false))
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(item.value().get()); lin && lin->nf4_base) {
      ++nf4_layers;
      ASSERT_TRUE(lin->nf4);
      EXPECT_TRUE(nn::is_unmaterialized(lin->weight)) << item.key();  // no dense copy kept
      held += lin->nf4->nbytes();
    }
  EXPECT_EQ(nf4_layers, 14);  // all seven projections of both layers
  // A block linear that modules_to_save trains whole stays dense and trains.
  auto kept = built("llama");
  auto whole = l;
  whole.modules_to_save = {"layers.1.mlp"};
  apply_lora(*kept, whole);
  const auto kept_params = kept->named_parameters();
  EXPECT_TRUE(kept_params.find("model.layers.1.mlp.up_proj.weight")->requires_grad());
  EXPECT_FALSE(nn::is_unmaterialized(*kept_params.find("model.layers.1.mlp.up_proj.weight")));
  EXPECT_TRUE(nn::is_unmaterialized(*kept_params.find("model.layers.0.mlp.up_proj.weight")));  // NF4
  EXPECT_FALSE(nn::is_unmaterialized(*nf4->named_parameters().find("lm_head.weight")));  // the head stays dense
  {
    c10::AutoGradMode no_grad(false);
    for (auto* m : {dense.get(), nf4.get()}) {
      torch::manual_seed(5);
      for (auto& [path, layer] : adapted_layers(*m)) layer->lora_B->weight.normal_(0, 0.3);
    }
  }
  const at::Tensor tokens = (torch::arange(24, torch::kLong) * 7 % 96).reshape({2, 12});
  EXPECT_TRUE(at::equal(nf4->logits(tokens), dense->logits(tokens)));
  nf4->forward(tokens, tokens).backward();
  dense->forward(tokens, tokens).backward();
  const auto want = dense->named_parameters();
  for (const auto& item : nf4->named_parameters())
    if (is_lora_parameter(item.key())) {
      // The input gradients' GEMMs run per projection here, stacked there: another summation order.
      const at::Tensor& g = want.find(item.key())->grad();
      EXPECT_LT((item.value().grad() - g).abs().max().item<double>(), 1e-6 * (1 + g.abs().max().item<double>()))
          << item.key();
    }
  // 4 bits a weight plus an 8-bit scale a block of 64 and fp32 scales of
  // those: about 0.127 of the fp32 bytes.
  int64_t dense_bytes = 0;
  for (const auto& item : dense->named_modules("", false))
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(item.value().get()); lin && item.key() != "lm_head" &&
                                                                        !is_lora_parameter(item.key() + ".weight"))
      if (item.key().find("lora_") == std::string::npos) dense_bytes += lin->weight.nbytes();
  EXPECT_LT(static_cast<double>(held) / dense_bytes, 0.13);
}
