// Presets, overrides, validation, analytic parameter counts and the Hugging
// Face config.json. No model is built here (see test_forward.cpp for that).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/model_config.h"

using namespace stratum;
using namespace stratum::models;

namespace {

// The architectures' parameter tensors listed one by one (numel of each),
// written independently of models::parameter_count.
int64_t count_by_tensors(const ModelConfig& c) {
  const int64_t C = c.hidden, F = c.ffn_hidden, hd = c.head_dim();
  std::vector<int64_t> sizes;
  if (c.arch == "gpt2") {
    sizes = {c.vocab_size * C, c.max_seq_len * C};  // wte, wpe
    for (int64_t l = 0; l < c.layers; ++l) {
      for (int64_t t : {C, C,                          // ln_1 weight, bias
                        C * 3 * C, 3 * C,              // c_attn
                        C * C, C,                      // attn.c_proj
                        C, C,                          // ln_2
                        C * F, F,                      // c_fc
                        F * C, C})                     // mlp.c_proj
        sizes.push_back(t);
    }
    sizes.push_back(C);  // ln_f weight
    sizes.push_back(C);  // ln_f bias
  } else {
    sizes = {c.vocab_size * C};  // embed_tokens
    for (int64_t l = 0; l < c.layers; ++l) {
      for (int64_t t : {C,                                 // input_layernorm
                        c.heads * hd * C,                  // q_proj
                        c.kv_heads * hd * C,               // k_proj
                        c.kv_heads * hd * C,               // v_proj
                        C * c.heads * hd,                  // o_proj
                        C})                                // post_attention_layernorm
        sizes.push_back(t);
      if (c.qk_norm) sizes.insert(sizes.end(), {hd, hd});  // q_norm, k_norm
      if (!c.is_moe()) {
        sizes.insert(sizes.end(), {F * C, F * C, C * F});  // gate, up, down
        continue;
      }
      sizes.push_back(c.num_experts * C);  // the router
      for (int64_t e = 0; e < c.num_experts; ++e)
        sizes.insert(sizes.end(), {c.moe_ffn_hidden * C, c.moe_ffn_hidden * C, C * c.moe_ffn_hidden});
      const int64_t S = c.shared_expert_ffn_hidden;
      if (S > 0) sizes.insert(sizes.end(), {S * C, S * C, C * S});
    }
    sizes.push_back(C);  // norm
  }
  if (!c.tie_embeddings) sizes.push_back(c.vocab_size * C);  // lm_head
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  return total;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ModelConfig, PublishedParameterCounts) {
  // GPT-2 small with tied embeddings and vocab 50257 (HF gpt2: 124,439,808).
  EXPECT_EQ(parameter_count(preset("gpt2-124m")), 124'439'808);
  // GPT-2 medium (HF gpt2-medium: 354,823,168).
  EXPECT_EQ(parameter_count(preset("gpt2-350m")), 354'823'168);
  // meta-llama/Llama-3.2-1B: 1,235,814,400 (tied).
  EXPECT_EQ(parameter_count(preset("llama-1b")), 1'235'814'400);
  // meta-llama/Meta-Llama-3-8B: 8,030,261,248 (untied).
  EXPECT_EQ(parameter_count(preset("llama-8b")), 8'030'261'248);
  // meta-llama/Meta-Llama-3-70B: 70,553,706,496 (untied).
  EXPECT_EQ(parameter_count(preset("llama-70b")), 70'553'706'496);
  // GPT-3 175B as a dense GPT-2 (96 x (12h^2 + 13h) + (50257 + 2048 + 2)h, h = 12288).
  EXPECT_EQ(parameter_count(preset("gpt3-175b")), 174'604'259'328);
}

TEST(ModelConfig, EveryPresetValidatesAndCountsLikeItsTensors) {
  ASSERT_EQ(preset_names().size(), 15u);
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = preset(name);
    EXPECT_EQ(c.name, name);
    EXPECT_NO_THROW(validate(c));
    EXPECT_EQ(parameter_count(c), count_by_tensors(c));
    ModelConfig untied = c;
    untied.tie_embeddings = !c.tie_embeddings;
    EXPECT_EQ(parameter_count(untied), count_by_tensors(untied));
  }
}

TEST(ModelConfig, PresetShapes) {
  const ModelConfig g = preset("gpt2-1.3b");  // GPT-3 XL's shape
  EXPECT_EQ(g.hidden, 2048);
  EXPECT_EQ(g.layers, 24);
  EXPECT_EQ(g.heads, 16);
  EXPECT_EQ(g.max_seq_len, 2048);
  EXPECT_EQ(parameter_count(g), 1'315'723'264);
  const ModelConfig l = preset("tiny-llama");
  EXPECT_EQ(l.arch, "llama");
  EXPECT_EQ(l.heads, 4);
  EXPECT_EQ(l.kv_heads, 2);
  const ModelConfig b = preset("gpt2-tiny-bytes");
  EXPECT_EQ(b.vocab_size, 256);
  EXPECT_EQ(preset("llama-1b").rope_theta, 500000);
  EXPECT_EQ(preset("llama-1b").rope_scaling_factor, 32);  // Llama 3.2's long-context RoPE
  EXPECT_EQ(preset("llama-1b").max_seq_len, 131072);
  EXPECT_EQ(preset("llama-8b").rope_scaling_factor, 0);   // Llama 3 (not 3.1): plain RoPE
  EXPECT_EQ(preset("llama-8b").max_seq_len, 8192);
  EXPECT_TRUE(preset("llama-1b").tie_embeddings);
  EXPECT_FALSE(preset("llama-8b").tie_embeddings);
  EXPECT_EQ(preset("llama-8b").ffn_hidden, 14336);
}

TEST(ModelConfig, UnknownPresetListsKnownNamesWithDidYouMean) {
  const std::string msg = error_of([] { preset("gpt2-124"); });
  EXPECT_NE(msg.find("unknown model 'gpt2-124'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'gpt2-124m'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama-8b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tiny-gpt2"), std::string::npos) << msg;
}

TEST(ModelConfig, OverridesEveryDimension) {
  const ModelConfig c = make_model_config(
      "tiny-llama", {{"layers", "3"}, {"hidden", "96"}, {"heads", "6"}, {"kv_heads", "3"}, {"ffn_hidden", "200"},
                     {"vocab_size", "300"}, {"max_seq_len", "32"}, {"rope_theta", "500000"}, {"norm_eps", "1e-6"},
                     {"init_std", "0.01"}, {"dropout", "0.1"}, {"attention_dropout", "0.2"}, {"tie_embeddings", "false"},
                     {"rope_scaling_factor", "8"}, {"rope_low_freq_factor", "2"}, {"rope_high_freq_factor", "3"},
                     {"rope_original_max_seq_len", "16"}, {"recompute_mlp_activation", "true"}});
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.hidden, 96);
  EXPECT_EQ(c.heads, 6);
  EXPECT_EQ(c.kv_heads, 3);
  EXPECT_EQ(c.ffn_hidden, 200);
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.max_seq_len, 32);
  EXPECT_EQ(c.rope_theta, 500000);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.init_std, 0.01);
  EXPECT_EQ(c.dropout, 0.1);
  EXPECT_EQ(c.attention_dropout_p(), 0.2);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.rope_scaling_factor, 8);
  EXPECT_EQ(c.rope_low_freq_factor, 2);
  EXPECT_EQ(c.rope_high_freq_factor, 3);
  EXPECT_EQ(c.rope_original_max_seq_len, 16);
  EXPECT_TRUE(c.recompute_mlp_activation);
  // A mixture of experts' shape, and Qwen3's attention.
  const ModelConfig m = make_model_config(
      "tiny-mixtral", {{"num_experts", "8"}, {"top_k", "3"}, {"moe_ffn_hidden", "40"}, {"shared_expert_ffn_hidden", "24"},
                       {"router_score", "sigmoid"}, {"norm_topk_prob", "false"}, {"router_groups", "4"},
                       {"router_top_groups", "2"}, {"routed_scaling_factor", "2.5"}, {"head_dim", "32"},
                       {"qk_norm", "true"}});
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.top_k, 3);
  EXPECT_EQ(m.moe_ffn_hidden, 40);
  EXPECT_EQ(m.shared_expert_ffn_hidden, 24);
  EXPECT_EQ(m.router_score, "sigmoid");
  EXPECT_FALSE(m.norm_topk_prob);
  EXPECT_EQ(m.router_groups, 4);
  EXPECT_EQ(m.router_top_groups, 2);
  EXPECT_EQ(m.routed_scaling_factor, 2.5);
  EXPECT_EQ(m.head_dim(), 32);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(parameter_count(m), count_by_tensors(m));
  EXPECT_EQ(override_keys().size(), 31u);
  EXPECT_THROW(make_model_config("tiny-llama", {{"rope_scaling_factor", "8"}, {"rope_high_freq_factor", "0.5"}}), Error);
}

TEST(ModelConfig, Gpt2HiddenAndHeadsCarryTheirDerivedSizes) {
  const ModelConfig c = make_model_config("tiny-gpt2", {{"hidden", "128"}, {"heads", "8"}});
  EXPECT_EQ(c.ffn_hidden, 512);
  EXPECT_EQ(c.kv_heads, 8);
  // An explicit ffn_hidden wins, in either order.
  EXPECT_EQ(make_model_config("tiny-gpt2", {{"ffn_hidden", "100"}, {"hidden", "128"}}).ffn_hidden, 100);
  EXPECT_EQ(make_model_config("tiny-gpt2", {{"hidden", "128"}, {"ffn_hidden", "100"}}).ffn_hidden, 100);
}

TEST(ModelConfig, TilingTokensAreZeroOrPositive) {
  EXPECT_EQ(preset("tiny-llama").tiled_mlp_tokens, 0);
  EXPECT_EQ(preset("tiny-llama").tiled_loss_tokens, 0);
  const ModelConfig c = make_model_config("tiny-llama", {{"tiled_mlp_tokens", "4096"}, {"tiled_loss_tokens", "0"}});
  EXPECT_EQ(c.tiled_mlp_tokens, 4096);
  EXPECT_EQ(c.tiled_loss_tokens, 0);
  for (const char* key : {"tiled_mlp_tokens", "tiled_loss_tokens"})
    for (const char* bad : {"-1", "x", ""}) {
      const std::string msg = error_of([&] { make_model_config("tiny-gpt2", {{key, bad}}); });
      EXPECT_NE(msg.find(std::string("'") + key + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("non-negative"), std::string::npos) << msg;
    }
  ModelConfig direct = preset("tiny-gpt2");
  direct.tiled_loss_tokens = -3;
  const std::string msg = error_of([&] { validate(direct); });
  EXPECT_NE(msg.find("tiled_loss_tokens"), std::string::npos) << msg;
}

TEST(ModelConfig, BadOverridesNameKeyAndValue) {
  std::string msg = error_of([] { make_model_config("tiny-gpt2", {{"layers", "abc"}}); });
  EXPECT_NE(msg.find("'layers'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'abc'"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-gpt2", {{"layers", "-2"}}); });
  EXPECT_NE(msg.find("positive integer"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-gpt2", {{"layers", "4x"}}); });
  EXPECT_NE(msg.find("'4x'"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-gpt2", {{"dropout", "1.5"}}); });
  EXPECT_NE(msg.find("'dropout'"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-gpt2", {{"tie_embeddings", "maybe"}}); });
  EXPECT_NE(msg.find("true or false"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-gpt2", {{"layer", "4"}}); });
  EXPECT_NE(msg.find("unknown model override 'layer'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'layers'"), std::string::npos) << msg;
  msg = error_of([] { parse_override("layers"); });
  EXPECT_NE(msg.find("key=value"), std::string::npos) << msg;
  EXPECT_EQ(parse_override("rope_theta=1e4"), (std::pair<std::string, std::string>{"rope_theta", "1e4"}));
}

TEST(ModelConfig, ValidationNamesTheBrokenRule) {
  std::string msg = error_of([] { make_model_config("tiny-gpt2", {{"heads", "5"}}); });
  EXPECT_NE(msg.find("hidden (64) must be a multiple of heads (5)"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-llama", {{"kv_heads", "3"}}); });
  EXPECT_NE(msg.find("heads (4) must be a multiple of kv_heads (3)"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-gpt2", {{"kv_heads", "2"}}); });
  EXPECT_NE(msg.find("must equal heads"), std::string::npos) << msg;
  msg = error_of([] { make_model_config("tiny-llama", {{"hidden", "36"}, {"heads", "4"}}); });  // head_dim 9
  EXPECT_NE(msg.find("must be even"), std::string::npos) << msg;
  // Several problems at once.
  ModelConfig c = preset("tiny-gpt2");
  c.layers = 0;
  c.vocab_size = 0;
  msg = error_of([&] { validate(c); });
  EXPECT_NE(msg.find("layers must be positive"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab_size must be positive"), std::string::npos) << msg;
}

TEST(ModelConfig, DescribeMentionsTheCount) {
  EXPECT_NE(describe(preset("gpt2-124m")).find("124,439,808 parameters"), std::string::npos);
  EXPECT_NE(describe(preset("llama-8b")).find("(8 kv)"), std::string::npos);
}

TEST(HfConfig, Gpt2Keys) {
  const nlohmann::json j = hf_config_json(preset("gpt2-124m"));
  EXPECT_EQ(j["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["vocab_size"], 50257);
  EXPECT_EQ(j["n_positions"], 1024);
  EXPECT_EQ(j["n_embd"], 768);
  EXPECT_EQ(j["n_layer"], 12);
  EXPECT_EQ(j["n_head"], 12);
  EXPECT_EQ(j["n_inner"], 3072);
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["layer_norm_epsilon"], 1e-5);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_EQ(j["eos_token_id"], 50256);
}

TEST(HfConfig, LlamaKeys) {
  const nlohmann::json j = hf_config_json(preset("llama-8b"), "bfloat16");
  EXPECT_EQ(j["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["hidden_size"], 4096);
  EXPECT_EQ(j["intermediate_size"], 14336);
  EXPECT_EQ(j["num_hidden_layers"], 32);
  EXPECT_EQ(j["num_attention_heads"], 32);
  EXPECT_EQ(j["num_key_value_heads"], 8);
  EXPECT_EQ(j["head_dim"], 128);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["rope_theta"], 500000.0);
  EXPECT_TRUE(j["rope_scaling"].is_null());
  EXPECT_EQ(j["attention_bias"], false);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["bos_token_id"], 128000);
}

TEST(HfConfig, EveryPresetRoundTrips) {
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = preset(name);
    const ModelConfig back = model_config_from_hf(hf_config_json(c), name);
    EXPECT_EQ(back.arch, c.arch);
    EXPECT_EQ(back.vocab_size, c.vocab_size);
    EXPECT_EQ(back.max_seq_len, c.max_seq_len);
    EXPECT_EQ(back.hidden, c.hidden);
    EXPECT_EQ(back.layers, c.layers);
    EXPECT_EQ(back.heads, c.heads);
    EXPECT_EQ(back.kv_heads, c.kv_heads);
    EXPECT_EQ(back.ffn_hidden, c.ffn_hidden);
    EXPECT_EQ(back.norm_eps, c.norm_eps);
    EXPECT_EQ(back.tie_embeddings, c.tie_embeddings);
    EXPECT_EQ(back.init_std, c.init_std);
    if (c.arch == "llama") {
      EXPECT_EQ(back.rope_theta, c.rope_theta);
      EXPECT_EQ(back.rope_scaling_factor, c.rope_scaling_factor);
      EXPECT_EQ(back.rope_low_freq_factor, c.rope_low_freq_factor);
      EXPECT_EQ(back.rope_high_freq_factor, c.rope_high_freq_factor);
      EXPECT_EQ(back.rope_original_max_seq_len, c.rope_original_max_seq_len);
    }
    EXPECT_EQ(parameter_count(back), parameter_count(c));
  }
}

TEST(HfConfig, ReadsLlama3RopeScalingInBothSpellings) {
  const nlohmann::json j = hf_config_json(preset("llama-1b"));
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"], 32.0);
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 8192);
  EXPECT_EQ(j["max_position_embeddings"], 131072);
  // transformers 5 writes rope_parameters, theta inside.
  nlohmann::json v5 = hf_config_json(preset("tiny-llama"));
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 250000.0}, {"factor", 8.0},
                           {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  const ModelConfig c = model_config_from_hf(v5);
  EXPECT_EQ(c.rope_theta, 250000.0);
  EXPECT_EQ(c.rope_scaling_factor, 8.0);
  EXPECT_EQ(c.rope_original_max_seq_len, 16);
}

TEST(HfConfig, RefusesWhatStratumCannotRepresent) {
  nlohmann::json j = hf_config_json(preset("tiny-llama"));
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}};
  EXPECT_NE(error_of([&] { model_config_from_hf(j); }).find("'rope_scaling.rope_type' is 'yarn'"), std::string::npos);
  j = hf_config_json(preset("tiny-llama"));
  j["attention_bias"] = true;
  EXPECT_NE(error_of([&] { model_config_from_hf(j); }).find("'attention_bias'"), std::string::npos);
  j = hf_config_json(preset("tiny-gpt2"));
  j["model_type"] = "mistral";
  EXPECT_NE(error_of([&] { model_config_from_hf(j); }).find("'mistral'"), std::string::npos);
  // LlamaConfig's default is untied.
  j = hf_config_json(preset("tiny-llama"));
  j.erase("tie_word_embeddings");
  EXPECT_FALSE(model_config_from_hf(j).tie_embeddings);
}
