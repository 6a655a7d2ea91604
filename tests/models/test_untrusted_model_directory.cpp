// A Hugging Face model directory from a stranger (--init-from, --model DIR):
// config.json and the shard index are read as untrusted JSON; sizes are
// bounded before anything is allocated; every value is checked for its JSON
// type; what transformers refuses or would build differently is refused by
// name; shards hold exactly what the index lists; integer tensors are never
// cast into weights. Every message names the file and the key or tensor.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "../common/error_of.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "stratum/io/safetensors_index.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/models/model_config.h"

using namespace stratum;
using namespace stratum::models;
using Json = nlohmann::json;

namespace {

const std::string kFixtures = std::string(STRATUM_TEST_DATA_DIR) + "/hf";

using stratum::test::error_of;

Json fixture_config(const std::string& name) {
  std::ifstream in(kFixtures + "/" + name + "/config.json");
  return Json::parse(in);
}

class UntrustedModelDirectory : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum_untrusted_model_"); }
  void TearDown() override { fs::remove_tree(dir_); }

  void write_text(const std::string& file, const std::string& text) const { std::ofstream(dir_ + "/" + file) << text; }
  void write_config(const Json& j) const { write_text("config.json", j.dump(1)); }
  std::string config_path() const { return dir_ + "/config.json"; }

  // The error reading `j` as this directory's config.json; it must name the file.
  std::string refusal(const Json& j) const {
    write_config(j);
    const std::string msg = error_of([&] { read_hf_model_config(dir_); });
    EXPECT_NE(msg.find(config_path()), std::string::npos) << msg;
    return msg;
  }

  std::string dir_;
};

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// 1. Sizes beyond the stated limits are refused before anything is allocated,
// and their products never overflow; every preset and real model fits.
TEST_F(UntrustedModelDirectory, SizesBeyondTheLimitsAreRefusedBeforeAllocating) {
  Json j = fixture_config("llama3");
  j["vocab_size"] = int64_t{1'000'000'000'000};
  std::string msg = refusal(j);
  EXPECT_HAS(msg, "'vocab_size'");
  EXPECT_HAS(msg, std::to_string(kMaxVocabSize));
  EXPECT_HAS(msg, "probably not a model config");
  j = fixture_config("gpt2");
  j["n_embd"] = 1'000'000'000;
  EXPECT_HAS(refusal(j), "'n_embd' is 1000000000, above 131072");
  j = fixture_config("llama3");
  j["num_hidden_layers"] = 1'000'000;
  EXPECT_HAS(refusal(j), "'num_hidden_layers' is 1000000, above 4096");
  // Each dimension within its limit, the whole far beyond: the product is refused, not overflowed.
  j = fixture_config("llama3");
  j["vocab_size"] = kMaxVocabSize;
  j["hidden_size"] = kMaxHidden;
  j["num_hidden_layers"] = kMaxLayers;
  j["intermediate_size"] = kMaxFfnHidden;
  j.erase("head_dim");
  msg = refusal(j);
  EXPECT_HAS(msg, "parameters are above 2199023255552 (2^41)");
  // The same limits hold for presets with --set overrides.
  EXPECT_HAS(error_of([] { make_model_config("tiny-gpt2", {{"layers", "1000000"}}); }), "layers 1000000 is above 4096");
  EXPECT_HAS(error_of([] { make_model_config("tiny-gpt2", {{"vocab_size", "1000000000000"}}); }), "vocab_size");
  // parameter_count saturates rather than overflowing on a shape validate() refuses.
  ModelConfig huge = preset("tiny-llama");
  huge.vocab_size = huge.hidden = huge.ffn_hidden = huge.layers = INT64_MAX / 2;
  huge.heads = huge.kv_heads = 1;
  EXPECT_EQ(parameter_count(huge), INT64_MAX);

  // Every preset, Llama 3.1 405B and Gemma's vocabulary are inside the limits.
  for (const auto& name : preset_names()) EXPECT_NO_THROW(validate(preset(name))) << name;
  ModelConfig l405 = preset("llama-70b");
  l405.hidden = 16384;
  l405.layers = 126;
  l405.heads = 128;
  l405.ffn_hidden = 53248;
  l405.max_seq_len = 131072;
  EXPECT_NO_THROW(validate(l405));
  EXPECT_GT(parameter_count(l405), int64_t{400'000'000'000});
  ModelConfig gemma_vocab = preset("llama-8b");
  gemma_vocab.vocab_size = 256000;
  EXPECT_NO_THROW(validate(gemma_vocab));
}

// 2. Integers are integers: no float, bool, string or out-of-range value is narrowed.
TEST_F(UntrustedModelDirectory, IntegersAreCheckedAsIntegersNamingTheKey) {
  const Json base = fixture_config("llama3");
  for (const Json& bad : {Json(4096.0), Json(12.5), Json(true), Json("32"), Json(nullptr)}) {
    Json j = base;
    j["hidden_size"] = bad;
    const std::string msg = refusal(j);
    EXPECT_HAS(msg, "'hidden_size'");
  }
  EXPECT_HAS(refusal([&] { Json j = base; j["hidden_size"] = 32.0; return j; }()), "expected an integer");
  Json j = base;
  j["num_attention_heads"] = -4;
  EXPECT_HAS(refusal(j), "'num_attention_heads' is -4; it must be at least 1");
  j = base;
  j["vocab_size"] = uint64_t{18446744073709551615u};  // would wrap to -1 as int64
  EXPECT_HAS(refusal(j), "'vocab_size' is 18446744073709551615, beyond a 64-bit integer");
  j = base;
  j["rope_parameters"]["original_max_position_embeddings"] = 32.5;
  EXPECT_HAS(refusal(j), "'rope_parameters.original_max_position_embeddings'");
  j = base;
  j.erase("intermediate_size");
  EXPECT_HAS(refusal(j), "'intermediate_size' is missing");
}

// 3a. RoPE: an incomplete or impossible llama3 scaling, other scaling types,
// and the two spellings (or two rope_theta) disagreeing are refused by name.
TEST_F(UntrustedModelDirectory, RopeScalingIsAppliedAsTransformersDoesOrRefusedByName) {
  const Json base = fixture_config("llama3");  // rope_parameters: llama3, factor 8, theta 500000
  Json j = base;
  j["rope_parameters"].erase("factor");
  EXPECT_HAS(refusal(j), "'rope_parameters.factor' is missing");
  j = base;
  j["rope_parameters"]["factor"] = 0.0;
  EXPECT_HAS(refusal(j), "'rope_parameters.factor' is 0.000000; it must be at least 1");
  j = base;
  j["rope_parameters"]["factor"] = 0.5;
  EXPECT_HAS(refusal(j), "'rope_parameters.factor'");
  j = base;
  j["rope_parameters"].erase("low_freq_factor");
  EXPECT_HAS(refusal(j), "'rope_parameters.low_freq_factor' is missing");
  j = base;
  j["rope_parameters"].erase("original_max_position_embeddings");
  EXPECT_HAS(refusal(j), "'rope_parameters.original_max_position_embeddings' is missing");
  j = base;
  j["rope_parameters"]["high_freq_factor"] = 0.5;
  EXPECT_HAS(refusal(j), "'rope_parameters.high_freq_factor'");
  for (const std::string type : {"linear", "dynamic", "yarn", "longrope"}) {
    j = base;
    j["rope_parameters"]["rope_type"] = type;
    EXPECT_HAS(refusal(j), "'rope_parameters.rope_type' is '" + type + "'");
  }
  j = base;
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};  // transformers 4's first spelling
  EXPECT_HAS(refusal(j), "'rope_scaling.type' is 'dynamic'");

  // Both spellings: agreeing is one model; disagreeing is refused naming both.
  j = base;
  j["rope_scaling"] = base["rope_parameters"];
  j["rope_scaling"].erase("rope_theta");
  write_config(j);
  EXPECT_EQ(read_hf_model_config(dir_).rope_scaling_factor, 8.0);
  j["rope_scaling"]["factor"] = 16.0;
  std::string msg = refusal(j);
  EXPECT_HAS(msg, "'rope_parameters'");
  EXPECT_HAS(msg, "'rope_scaling' disagree");
  j = base;
  j["rope_scaling"] = nullptr;  // null: no scaling given there
  write_config(j);
  EXPECT_EQ(read_hf_model_config(dir_).rope_scaling_factor, 8.0);
  j = base;
  j["rope_theta"] = 10000.0;
  msg = refusal(j);
  EXPECT_HAS(msg, "'rope_parameters.rope_theta'");
  EXPECT_HAS(msg, "'rope_theta'");
  j["rope_theta"] = 500000.0;
  write_config(j);
  EXPECT_EQ(read_hf_model_config(dir_).rope_theta, 500000.0);
}

// 3b. Dropout probabilities outside [0, 1) and GPT-2's two dropouts differing.
TEST_F(UntrustedModelDirectory, DropoutsOutsideZeroToOneOrDifferingAreRefusedByName) {
  Json j = fixture_config("llama3");
  j["attention_dropout"] = -0.5;  // ModelConfig's "as dropout" sentinel must not leak in
  EXPECT_HAS(refusal(j), "'attention_dropout' is -0.500000; a dropout probability must be in [0, 1)");
  j = fixture_config("gpt2");
  j["attn_pdrop"] = -0.1;
  EXPECT_HAS(refusal(j), "'attn_pdrop'");
  j = fixture_config("gpt2");
  j["resid_pdrop"] = 1.0;
  EXPECT_HAS(refusal(j), "'resid_pdrop'");
  j = fixture_config("gpt2");
  j["embd_pdrop"] = 0.1;
  const std::string msg = refusal(j);
  EXPECT_HAS(msg, "'embd_pdrop'");
  EXPECT_HAS(msg, "'resid_pdrop'");
  // Absent, GPT2Config's default (0.1) applies, as in transformers.
  j = fixture_config("gpt2");
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) j.erase(key);
  write_config(j);
  EXPECT_DOUBLE_EQ(read_hf_model_config(dir_).dropout, 0.1);
}

// 3c. Keys that change the model and that Stratum does not implement, and wrong types.
TEST_F(UntrustedModelDirectory, SettingsStratumCannotBuildAreRefusedByName) {
  const Json llama = fixture_config("llama3"), gpt2 = fixture_config("gpt2");
  auto refused = [&](Json j, const std::string& key, const Json& value) {
    j[key] = value;
    return refusal(j);
  };
  EXPECT_HAS(refused(llama, "sliding_window", 16), "'sliding_window'");
  EXPECT_HAS(refused(llama, "use_sliding_window", true), "'use_sliding_window'");
  EXPECT_HAS(refused(llama, "head_dim", 16), "'head_dim' is 16, not hidden_size / num_attention_heads");
  EXPECT_HAS(refused(llama, "hidden_act", "gelu"), "'hidden_act' is 'gelu'");
  EXPECT_HAS(refused(llama, "mlp_bias", true), "'mlp_bias' is true");
  EXPECT_HAS(refused(llama, "attention_bias", "false"), "'attention_bias' is \"false\"; expected true or false");
  EXPECT_HAS(refused(llama, "tie_word_embeddings", 1), "'tie_word_embeddings'");
  EXPECT_HAS(refused(llama, "partial_rotary_factor", 0.5), "'partial_rotary_factor'");
  EXPECT_HAS(refused(llama, "rms_norm_eps", nullptr), "'rms_norm_eps' is null");
  EXPECT_HAS(refused(llama, "rms_norm_eps", "1e-5"), "'rms_norm_eps'");
  EXPECT_HAS(refused(llama, "model_type", 7), "'model_type'");
  EXPECT_HAS(refused(gpt2, "activation_function", "relu"), "'activation_function' is 'relu'");
  EXPECT_HAS(refused(gpt2, "add_cross_attention", true), "'add_cross_attention'");
  EXPECT_HAS(refused(gpt2, "n_inner", 64.0), "'n_inner'");
  // pretraining_tp only splits transformers' matmuls (the same model): taken.
  Json j = llama;
  j["pretraining_tp"] = 2;
  write_config(j);
  EXPECT_NO_THROW(read_hf_model_config(dir_));
  EXPECT_HAS(refused(llama, "pretraining_tp", 0), "'pretraining_tp'");
  // Nulls where transformers has a derived default take it.
  j = llama;
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = nullptr;
  j["sliding_window"] = nullptr;
  write_config(j);
  EXPECT_EQ(read_hf_model_config(dir_).kv_heads, 4);
}

// 4. config.json is untrusted JSON: a key given twice, a FIFO, a huge file,
// deep nesting are refused naming the file.
TEST_F(UntrustedModelDirectory, ConfigJsonIsReadAsUntrustedJson) {
  std::string text = fixture_config("gpt2").dump(1);
  text.insert(text.rfind('}'), ", \"n_layer\": 24");
  write_text("config.json", text);
  std::string msg = error_of([&] { read_hf_model_config(dir_); });
  EXPECT_HAS(msg, config_path());
  EXPECT_HAS(msg, "n_layer");
  EXPECT_HAS(msg, "given more than once");

  write_text("config.json", std::string(100, '[') + std::string(100, ']'));
  msg = error_of([&] { read_hf_model_config(dir_); });
  EXPECT_HAS(msg, config_path());
  EXPECT_HAS(msg, "nested deeper");

  fs::remove_tree(config_path());
  ASSERT_EQ(::mkfifo(config_path().c_str(), 0600), 0);  // must not block
  msg = error_of([&] { read_hf_model_config(dir_); });
  EXPECT_HAS(msg, config_path());
  EXPECT_HAS(msg, "a Hugging Face config.json");

  fs::remove_tree(config_path());
  write_text("config.json", "{}");
  ASSERT_EQ(::truncate(config_path().c_str(), static_cast<off_t>(kMaxHfConfigBytes + 1)), 0);
  msg = error_of([&] { read_hf_model_config(dir_); });
  EXPECT_HAS(msg, config_path());
}

// 5. The index: shard names stay inside the directory; entries have their types;
// shards hold exactly what the index lists.
TEST_F(UntrustedModelDirectory, TheShardIndexIsCheckedEntryByEntry) {
  const std::string path = "dir/model.safetensors.index.json";
  auto index_error = [&](const Json& j) { return error_of([&] { io::parse_safetensors_index(j.dump(), path); }); };
  auto one = [](const Json& shard) { return Json{{"weight_map", {{"lm_head.weight", shard}}}}; };
  EXPECT_HAS(index_error(one("../outside.safetensors")), "'lm_head.weight'");
  EXPECT_HAS(index_error(one("../outside.safetensors")), "not a plain file name");
  EXPECT_HAS(index_error(one("/etc/passwd")), path);
  EXPECT_HAS(index_error(one("model.bin")), "*.safetensors");
  EXPECT_HAS(index_error(one(".safetensors")), "*.safetensors");
  EXPECT_HAS(index_error(one(std::string("a\0b.safetensors", 15))), "NUL");
  EXPECT_HAS(index_error(one(7)), "weight_map['lm_head.weight'] is 7");
  EXPECT_HAS(index_error(Json{{"weight_map", Json::object()}}), "names no tensors");
  EXPECT_HAS(index_error(Json{{"weight_map", Json::array()}}), "no 'weight_map' object");
  Json bad_total = one("m.safetensors");
  bad_total["metadata"] = {{"total_size", "lots"}};
  EXPECT_HAS(index_error(bad_total), "'metadata.total_size'");
  // A tensor named twice is a repeated key: refused by the JSON reader.
  const std::string twice = R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})";
  EXPECT_HAS(error_of([&] { io::parse_safetensors_index(twice, path); }), "given more than once");
  Json good = one("m-1.safetensors");
  good["weight_map"]["b"] = "m-2.safetensors";
  good["metadata"] = {{"total_size", 1024}};
  const auto shards = io::parse_safetensors_index(good.dump(), path);
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards.at("m-2.safetensors"), std::vector<std::string>{"b"});

  // On disk: a shard holding a tensor its index does not list, and a listed tensor the shard lacks.
  io::write_safetensors(dir_ + "/s-1.safetensors", {{"a", torch::ones({2})}, {"extra", torch::ones({2})}});
  write_text("model.safetensors.index.json", Json{{"weight_map", {{"a", "s-1.safetensors"}}}}.dump());
  std::string msg = error_of([&] { read_hf_checkpoint(dir_); });
  EXPECT_HAS(msg, dir_ + "/s-1.safetensors");
  EXPECT_HAS(msg, "'extra'");
  write_text("model.safetensors.index.json",
             Json{{"weight_map", {{"a", "s-1.safetensors"}, {"extra", "s-1.safetensors"}, {"b", "s-1.safetensors"}}}}
                 .dump());
  msg = error_of([&] { read_hf_checkpoint(dir_); });
  EXPECT_HAS(msg, "no tensor 'b'");
}

// 6. Integer tensors (a quantized checkpoint) are refused naming the tensor and dtype.
TEST_F(UntrustedModelDirectory, IntegerTensorsAreNeverCastIntoWeights) {
  const std::string dir = kFixtures + "/llama2";
  auto tensors = read_hf_checkpoint(dir);
  auto model = build_model(read_hf_model_config(dir));
  for (const auto& [dtype, shown] : std::vector<std::pair<at::ScalarType, std::string>>{
           {torch::kInt8, "int8"}, {torch::kUInt8, "uint8"}, {torch::kInt32, "int32"}, {torch::kBool, "bool"}}) {
    auto quantized = tensors;
    const at::Tensor& w = tensors.at("model.layers.0.mlp.up_proj.weight");
    quantized["model.layers.0.mlp.up_proj.weight"] = torch::zeros(w.sizes(), dtype);
    const std::string msg = error_of([&] { hf_whole_parameters(*model, quantized, dir); });
    EXPECT_HAS(msg, dir);
    EXPECT_HAS(msg, "'model.layers.0.mlp.up_proj.weight' is " + shown);
  }
  auto tied = tensors;
  tied["lm_head.weight"] = torch::zeros(tensors.at("model.embed_tokens.weight").sizes(), torch::kInt8);
  EXPECT_HAS(error_of([&] { hf_whole_parameters(*model, tied, dir); }), "'lm_head.weight' is int8");
}

}  // namespace
