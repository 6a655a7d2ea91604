// Mixture-of-experts models written by transformers itself (tests/data/hf,
// made by make_moe_fixtures.py): Mixtral and Qwen3-MoE (q/k norms, a head
// width of its own, normalised and raw top-k weights) read as transformers
// wrote them (their logits: test_hf_fixtures.cpp); their weights and config.json
// go out and come back unchanged. Also the presets' parameter counts (the
// published totals) and what a mixture of experts refuses by name.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "stratum/core/error.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"

using namespace stratum;
using namespace stratum::models;

namespace {
const std::string kFixtures = std::string(STRATUM_TEST_DATA_DIR) + "/hf";
}  // namespace

// Their logits against transformers': HfFixtures.LogitsMatchTransformers.
TEST(MoEHfFixtures, ConfigsReadAsTransformersWroteThem) {
  for (const std::string name : {"mixtral", "qwen3_moe", "qwen3_moe_unnormalised"})
    EXPECT_TRUE(read_hf_model_config(kFixtures + "/" + name).is_moe()) << name;
  const ModelConfig mixtral = read_hf_model_config(kFixtures + "/mixtral");
  EXPECT_EQ(mixtral.arch, "mixtral");
  EXPECT_EQ(mixtral.num_experts, 4);
  EXPECT_EQ(mixtral.top_k, 2);
  EXPECT_EQ(mixtral.moe_ffn_hidden, 48);
  const ModelConfig qwen = read_hf_model_config(kFixtures + "/qwen3_moe");
  EXPECT_EQ(qwen.head_dim(), 16);
  EXPECT_TRUE(qwen.qk_norm);
  EXPECT_TRUE(qwen.norm_topk_prob);
  EXPECT_FALSE(read_hf_model_config(kFixtures + "/qwen3_moe_unnormalised").norm_topk_prob);
}

TEST(MoEHfFixtures, ExportThenImportThenExportIsIdentical) {
  for (const std::string name : {"mixtral", "qwen3_moe"}) {
    SCOPED_TRACE(name);
    const std::string dir = kFixtures + "/" + name;
    const ModelConfig c = read_hf_model_config(dir);
    auto model = build_model(c);
    load_hf_state_dict(*model, read_hf_checkpoint(dir), dir);
    const auto first = to_hf_state_dict(*model);
    // Every tensor of the file goes out under its own name.
    const auto file = read_hf_checkpoint(dir);
    EXPECT_EQ(first.size(), file.size());
    for (const auto& [n, t] : first) {
      ASSERT_EQ(file.count(n), 1u) << n;
      EXPECT_TRUE(torch::equal(t, file.at(n))) << n;
    }
    const ModelConfig back = model_config_from_hf(hf_config_json(c), name);
    EXPECT_EQ(hf_config_json(back), hf_config_json(c));
    auto again = build_model(back);
    std::map<std::string, at::Tensor> tensors(first.begin(), first.end());
    load_hf_state_dict(*again, tensors, "exported");
    const auto second = to_hf_state_dict(*again);
    ASSERT_EQ(second.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(second[i].first, first[i].first);
      EXPECT_TRUE(torch::equal(second[i].second, first[i].second)) << first[i].first;
    }
  }
}

TEST(MoEPresets, ParameterCountsAreThePublishedOnes) {
  EXPECT_EQ(parameter_count(preset("mixtral-8x7b")), 46702792704);
  EXPECT_EQ(active_parameter_count(preset("mixtral-8x7b")), 12879925248);
  EXPECT_EQ(parameter_count(preset("qwen3-30b-a3b")), 30532122624);
  EXPECT_EQ(active_parameter_count(preset("qwen3-30b-a3b")), 3353032704);
  for (const std::string name : {"tiny-mixtral", "tiny-qwen3-moe"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = preset(name);
    auto model = construct_model(c, {}, c10::kMeta);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(n, parameter_count(c));
  }
}

TEST(MoEPresets, BadShapesAreNamed) {
  EXPECT_NE(test::error_of([] { make_model_config("tiny-mixtral", {{"top_k", "5"}}); })
                .find("top_k 5 must be between 1 and num_experts (4)"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { make_model_config("tiny-llama", {{"num_experts", "4"}}); }).find("is dense"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { make_model_config("tiny-qwen3-moe", {{"router_groups", "3"}}); })
                .find("router_groups 3 must divide num_experts (8)"),
            std::string::npos);
  nlohmann::json j = hf_config_json(preset("tiny-qwen3-moe"));
  j["mlp_only_layers"] = {1};
  EXPECT_NE(test::error_of([&] { model_config_from_hf(j); }).find("mlp_only_layers"), std::string::npos);
  j = hf_config_json(preset("tiny-mixtral"));
  j["router_jitter_noise"] = 0.1;
  EXPECT_NE(test::error_of([&] { model_config_from_hf(j); }).find("router_jitter_noise"), std::string::npos);
  j = hf_config_json(preset("tiny-mixtral"));
  j["num_experts"] = 8;  // disagrees with num_local_experts
  EXPECT_NE(test::error_of([&] { model_config_from_hf(j); }).find("num_experts"), std::string::npos);
}
