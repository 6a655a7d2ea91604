// Models written by transformers itself (tests/data/hf, made by
// make_fixtures.py): GPT-2, a Llama-3 shape (GQA, llama3 RoPE scaling, untied,
// in shards with an index) and a Llama-2 shape (tied) load from their
// directories, and their logits are transformers' on the same input.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/io/safetensors.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"

using namespace stratum;
using namespace stratum::models;

namespace {
const std::string kFixtures = std::string(STRATUM_TEST_DATA_DIR) + "/hf";
}  // namespace

TEST(HfFixtures, LogitsMatchTransformers) {
  // The mixtures of experts (make_moe_fixtures.py) too: Mixtral, Qwen3-MoE with
  // and without the chosen experts' weights normalised.
  for (const std::string name : {"gpt2", "llama3", "llama2", "mixtral", "qwen3_moe", "qwen3_moe_unnormalised"}) {
    SCOPED_TRACE(name);
    const std::string dir = kFixtures + "/" + name;
    const ModelConfig c = read_hf_model_config(dir);
    EXPECT_EQ(c.name, name);
    torch::manual_seed(0);
    auto model = build_model(c);
    load_hf_state_dict(*model, read_hf_checkpoint(dir), dir);
    model->eval();
    const auto want = io::read_safetensors(dir + "/transformers_logits.safetensors");
    torch::NoGradGuard no_grad;
    const at::Tensor got = model->logits(want.at("input_ids"));
    const at::Tensor ref = want.at("logits");
    ASSERT_EQ(got.sizes(), ref.sizes());
    const double err = (got - ref).abs().max().item<double>(), scale = ref.abs().max().item<double>();
    EXPECT_LT(err, 1e-5 * std::max(1.0, scale)) << "max |stratum - transformers| " << err;
  }
  const ModelConfig l3 = read_hf_model_config(kFixtures + "/llama3");
  EXPECT_EQ(l3.kv_heads, 2);
  EXPECT_EQ(l3.rope_scaling_factor, 8.0);
  EXPECT_FALSE(l3.tie_embeddings);
  EXPECT_TRUE(read_hf_model_config(kFixtures + "/llama2").tie_embeddings);
}

TEST(HfFixtures, AMissingOrMisshapedTensorIsNamed) {
  const std::string dir = kFixtures + "/llama3";
  auto tensors = read_hf_checkpoint(dir);
  auto model = build_model(read_hf_model_config(dir));
  auto missing = tensors;
  missing.erase("model.layers.1.self_attn.k_proj.weight");
  try {
    load_hf_state_dict(*model, missing, dir);
    ADD_FAILURE() << "a missing tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.k_proj.weight"), std::string::npos) << e.what();
  }
  auto wrong = tensors;
  wrong["model.norm.weight"] = torch::zeros({31});
  try {
    load_hf_state_dict(*model, wrong, dir);
    ADD_FAILURE() << "a mis-shaped tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_hf_model_config(kFixtures + "/nothing-here"), Error);
}
