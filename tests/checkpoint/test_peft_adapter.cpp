// LoRA adapters in peft's layout, against directories the real peft 0.21.2
// saved (tests/data/hf/make_peft_fixtures.py): what Stratum reads from them,
// that what it writes has peft's keys, dtypes and config, and that every
// adapter it cannot run as peft would is refused naming the file and key.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "stratum/checkpoint/peft_adapter.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"

namespace {

using namespace stratum;
using stratum::test::error_of;
using Json = nlohmann::json;

const std::string kHf = std::string(STRATUM_TEST_DATA_DIR) + "/hf";
const std::string kGpt2 = kHf + "/gpt2_lora", kLlama3 = kHf + "/llama3_lora";

Json read_json(const std::string& path) { return Json::parse(fs::read_regular_file(path, 1 << 20, "JSON")); }
void write_json(const std::string& path, const Json& j) { std::ofstream(path) << j.dump(2); }

std::map<std::string, at::Tensor> by_name(const PeftAdapter& a) { return {a.tensors.begin(), a.tensors.end()}; }

std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

class PeftAdapterFiles : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum_peft_"); }
  void TearDown() override { fs::remove_tree(dir_); }
  // A copy of a fixture to spoil: returns its directory.
  std::string copy_of(const std::string& fixture) {
    const std::string out = dir_ + "/copy";
    fs::make_directories(out);
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
      std::ofstream(out + "/" + f, std::ios::binary)
          << fs::read_regular_file(fixture + "/" + f, 1 << 24, "fixture");
    return out;
  }
  // The fixture's copy with adapter_config.json's `key` set to `value`.
  std::string with_key(const std::string& fixture, const std::string& key, const Json& value) {
    const std::string out = copy_of(fixture);
    Json j = read_json(out + "/adapter_config.json");
    j[key] = value;
    write_json(out + "/adapter_config.json", j);
    return out;
  }
  // The fixture's copy with its tensors (peft's keys) changed by `edit`.
  template <class Edit>
  std::string with_tensors(const std::string& fixture, Edit edit) {
    const std::string out = copy_of(fixture);
    auto tensors = io::read_safetensors(out + "/adapter_model.safetensors");
    edit(tensors);
    io::write_safetensors(out + "/adapter_model.safetensors", {tensors.begin(), tensors.end()});
    return out;
  }
  std::string dir_;
};

// --- what peft wrote ---------------------------------------------------------------------

TEST(PeftAdapter, ReadsWhatPeftWroteForGpt2) {
  const PeftAdapter a = read_peft_adapter(kGpt2);
  EXPECT_EQ(a.lora.r, 4);
  EXPECT_EQ(a.lora.lora_alpha, 8.0);
  EXPECT_EQ(a.lora.lora_dropout, 0.0);
  EXPECT_FALSE(a.lora.use_rslora);
  EXPECT_TRUE(a.fan_in_fan_out);  // Conv1D
  EXPECT_EQ(as_set(a.lora.target_modules), (std::set<std::string>{"c_attn", "c_proj", "c_fc"}));
  EXPECT_TRUE(a.lora.modules_to_save.empty());
  EXPECT_EQ(a.base_model_name_or_path, "tests/data/hf/gpt2");
  // Stratum's names: 2 blocks x (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) x (A, B).
  const auto t = by_name(a);
  EXPECT_EQ(t.size(), 16u);
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"transformer.h.0.attn.c_attn.lora_A.weight", {4, 32}}, {"transformer.h.0.attn.c_attn.lora_B.weight", {96, 4}},
      {"transformer.h.1.attn.c_proj.lora_A.weight", {4, 32}}, {"transformer.h.1.attn.c_proj.lora_B.weight", {32, 4}},
      {"transformer.h.0.mlp.c_fc.lora_A.weight", {4, 32}},    {"transformer.h.0.mlp.c_fc.lora_B.weight", {128, 4}},
      {"transformer.h.1.mlp.c_proj.lora_A.weight", {4, 128}}, {"transformer.h.1.mlp.c_proj.lora_B.weight", {32, 4}}};
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(t.count(name)) << name;
    EXPECT_EQ(t.at(name).sizes().vec(), shape) << name;
    EXPECT_EQ(t.at(name).scalar_type(), at::kFloat) << name;
  }
}

TEST(PeftAdapter, ReadsWhatPeftWroteForLlama3WithModulesToSave) {
  const PeftAdapter a = read_peft_adapter(kLlama3);
  EXPECT_EQ(a.lora.r, 4);
  EXPECT_EQ(a.lora.lora_alpha, 16.0);
  EXPECT_TRUE(a.lora.use_rslora);
  EXPECT_FALSE(a.fan_in_fan_out);
  EXPECT_EQ(as_set(a.lora.target_modules),
            (std::set<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  EXPECT_EQ(a.lora.modules_to_save, std::vector<std::string>{"lm_head"});
  const auto t = by_name(a);
  EXPECT_EQ(t.size(), 2u * 7 * 2 + 1);
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"model.layers.0.self_attn.q_proj.lora_B.weight", {32, 4}},
      {"model.layers.0.self_attn.k_proj.lora_B.weight", {16, 4}},  // GQA: 2 key/value heads of 8
      {"model.layers.1.mlp.down_proj.lora_A.weight", {4, 64}},
      {"model.layers.1.mlp.gate_proj.lora_B.weight", {64, 4}},
      {"lm_head.weight", {320, 32}}};  // peft's "base_model.model.lm_head.weight": no "modules_to_save.default."
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(t.count(name)) << name;
    EXPECT_EQ(t.at(name).sizes().vec(), shape) << name;
  }
}

TEST(PeftAdapter, ReadsPeftsValuesUnderStrippedKeys) {
  for (const std::string& dir : {kGpt2, kLlama3}) {
    const auto file = io::read_safetensors(dir + "/adapter_model.safetensors");
    const auto t = by_name(read_peft_adapter(dir));
    ASSERT_EQ(t.size(), file.size());
    for (const auto& [key, value] : file) {
      ASSERT_EQ(key.rfind(kPeftKeyPrefix, 0), 0u) << key;
      EXPECT_TRUE(at::equal(t.at(key.substr(std::string(kPeftKeyPrefix).size())), value)) << key;
    }
  }
}

// --- what Stratum writes -----------------------------------------------------------------

TEST_F(PeftAdapterFiles, WriteThenReadIsExact) {
  for (const std::string& fixture : {kGpt2, kLlama3}) {
    const PeftAdapter a = read_peft_adapter(fixture);
    write_peft_adapter(dir_ + "/out", a);
    const PeftAdapter b = read_peft_adapter(dir_ + "/out");
    EXPECT_EQ(b.lora.r, a.lora.r);
    EXPECT_EQ(b.lora.lora_alpha, a.lora.lora_alpha);
    EXPECT_EQ(b.lora.lora_dropout, a.lora.lora_dropout);
    EXPECT_EQ(b.lora.use_rslora, a.lora.use_rslora);
    EXPECT_EQ(b.lora.target_modules, a.lora.target_modules);
    EXPECT_EQ(b.lora.modules_to_save, a.lora.modules_to_save);
    EXPECT_EQ(b.fan_in_fan_out, a.fan_in_fan_out);
    EXPECT_EQ(b.base_model_name_or_path, a.base_model_name_or_path);
    ASSERT_EQ(b.tensors.size(), a.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      EXPECT_EQ(b.tensors[i].first, a.tensors[i].first);
      EXPECT_TRUE(at::equal(b.tensors[i].second, a.tensors[i].second)) << a.tensors[i].first;
    }
    fs::remove_tree(dir_ + "/out");
  }
}

TEST_F(PeftAdapterFiles, WritesPeftsTensorKeysAndDtypes) {
  for (const std::string& fixture : {kGpt2, kLlama3}) {
    write_peft_adapter(dir_ + "/out", read_peft_adapter(fixture));
    const auto peft = io::read_safetensors_header(fixture + "/adapter_model.safetensors");
    const auto ours = io::read_safetensors_header(dir_ + "/out/adapter_model.safetensors");
    std::map<std::string, std::pair<std::string, std::vector<int64_t>>> want, got;
    for (const auto& e : peft.tensors) want[e.name] = {e.dtype, e.shape};
    for (const auto& e : ours.tensors) got[e.name] = {e.dtype, e.shape};
    EXPECT_EQ(got, want) << fixture;
    EXPECT_EQ(ours.metadata, peft.metadata);  // {"format": "pt"}
    fs::remove_tree(dir_ + "/out");
  }
}

// Key by key against peft's own adapter_config.json. The differences allowed:
//   peft_version     peft's own version; Stratum writes none (peft fills in its own on loading)
//   target_modules   peft saves a Python set: the same names in another order
TEST_F(PeftAdapterFiles, WritesPeftsAdapterConfig) {
  for (const std::string& fixture : {kGpt2, kLlama3}) {
    write_peft_adapter(dir_ + "/out", read_peft_adapter(fixture));
    const Json peft = read_json(fixture + "/adapter_config.json");
    const Json ours = read_json(dir_ + "/out/adapter_config.json");
    for (auto it = peft.begin(); it != peft.end(); ++it) {
      const std::string& key = it.key();
      if (key == "peft_version") {
        EXPECT_FALSE(ours.contains(key));
        continue;
      }
      ASSERT_TRUE(ours.contains(key)) << fixture << ": Stratum does not write '" << key << "'";
      if (key == "target_modules")
        EXPECT_EQ(as_set(ours[key].get<std::vector<std::string>>()),
                  as_set(it.value().get<std::vector<std::string>>()));
      else
        EXPECT_EQ(ours[key], it.value()) << fixture << ": key '" << key << "'";
    }
    for (auto it = ours.begin(); it != ours.end(); ++it)
      EXPECT_TRUE(peft.contains(it.key())) << "Stratum writes '" << it.key() << "', which peft does not";
    fs::remove_tree(dir_ + "/out");
  }
}

TEST_F(PeftAdapterFiles, WritesAllLinearAsTheAdaptedLayersNames) {
  PeftAdapter a;
  a.lora.r = 2;
  a.lora.lora_alpha = 3.5;
  a.lora.target_modules = {"all-linear"};
  a.tensors = {{"model.layers.0.self_attn.q_proj.lora_A.weight", at::zeros({2, 8})},
               {"model.layers.0.self_attn.q_proj.lora_B.weight", at::zeros({8, 2})},
               {"model.layers.0.mlp.up_proj.lora_A.weight", at::zeros({2, 8}, at::kBFloat16)},
               {"model.layers.0.mlp.up_proj.lora_B.weight", at::zeros({16, 2}, at::kBFloat16)}};
  write_peft_adapter(dir_ + "/out", a);
  const Json j = read_json(dir_ + "/out/adapter_config.json");
  EXPECT_EQ(j["target_modules"], Json({"q_proj", "up_proj"}));  // peft expands "all-linear" before saving too
  EXPECT_EQ(j["lora_alpha"], 3.5);
  EXPECT_TRUE(j["base_model_name_or_path"].is_null());
  EXPECT_TRUE(j["modules_to_save"].is_null());
  EXPECT_EQ(by_name(read_peft_adapter(dir_ + "/out")).at("model.layers.0.mlp.up_proj.lora_B.weight").scalar_type(),
            at::kBFloat16);
}

TEST_F(PeftAdapterFiles, WriteRefusesWhatPeftCouldNotLoad) {
  PeftAdapter a;
  a.lora.r = 2;
  a.tensors = {{"model.layers.0.self_attn.q_proj.lora_A.weight", at::zeros({2, 8})}};
  EXPECT_NE(error_of([&] { write_peft_adapter(dir_ + "/out", a); }).find("has no 'model.layers.0.self_attn.q_proj.lora_B.weight'"),
            std::string::npos);
  a.tensors = {{"model.norm.weight", at::zeros({8})}};
  EXPECT_NE(error_of([&] { write_peft_adapter(dir_ + "/out", a); }).find("tensor 'model.norm.weight' is neither"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/out/adapter_config.json"));
}

// With STRATUM_PEFT_OUT set, writes what Stratum reads from each fixture into
// $STRATUM_PEFT_OUT/{gpt2_lora,llama3_lora}, to load with peft by hand:
//   python3 scripts/peft_check_adapter.py tests/data/hf/llama3 $STRATUM_PEFT_OUT/llama3_lora \
//     tests/data/hf/llama3_lora/peft_logits.safetensors
TEST(PeftAdapter, WritesForPeftsLoaderWhenAsked) {
  const char* out = std::getenv("STRATUM_PEFT_OUT");
  if (!out || !*out) GTEST_SKIP() << "STRATUM_PEFT_OUT not set";
  write_peft_adapter(std::string(out) + "/gpt2_lora", read_peft_adapter(kGpt2));
  write_peft_adapter(std::string(out) + "/llama3_lora", read_peft_adapter(kLlama3));
}

// --- what is refused, named by file and key --------------------------------------------------

TEST_F(PeftAdapterFiles, RefusesMissingFilesAndPickles) {
  const std::string e = error_of([&] { read_peft_adapter(dir_); });
  EXPECT_NE(e.find(dir_ + "/adapter_config.json: missing"), std::string::npos) << e;
  std::ofstream(dir_ + "/adapter_config.json") << read_json(kGpt2 + "/adapter_config.json").dump();
  EXPECT_NE(error_of([&] { read_peft_adapter(dir_); }).find(dir_ + "/adapter_model.safetensors: missing"),
            std::string::npos);
  std::ofstream(dir_ + "/adapter_model.bin") << "pickle";
  const std::string pickle = error_of([&] { read_peft_adapter(dir_); });
  EXPECT_NE(pickle.find(dir_ + "/adapter_model.bin"), std::string::npos) << pickle;
  EXPECT_NE(pickle.find("convert it to safetensors"), std::string::npos) << pickle;
}

TEST_F(PeftAdapterFiles, RefusesConfigsThatChangeTheMath) {
  const std::vector<std::pair<std::string, Json>> refused = {
      {"peft_type", "LOHA"},
      {"task_type", "SEQ_CLS"},
      {"use_dora", true},
      {"rank_pattern", {{"q_proj", 8}}},
      {"alpha_pattern", {{"q_proj", 32}}},
      {"layers_to_transform", {0}},
      {"exclude_modules", {"k_proj"}},
      {"bias", "lora_only"},
      {"lora_bias", true},
      {"use_qalora", true},
      {"layer_replication", {{0, 1}}},
      {"trainable_token_indices", {1, 2}},
      {"alora_invocation_tokens", {5}},
      {"kasa_config", Json::object({{"x", 1}})},
      {"init_lora_weights", "pissa"},
      {"init_lora_weights", "loftq"},
      {"target_modules", ".*proj"},
      {"r", 0},
      {"r", 2.5},
      {"lora_alpha", "16"},
      {"use_rslora", "yes"},
      {"a_later_peft_option", 3},
  };
  for (const auto& [key, value] : refused) {
    const std::string dir = with_key(kLlama3, key, value);
    const std::string e = error_of([&] { read_peft_adapter(dir); });
    EXPECT_NE(e.find(dir + "/adapter_config.json"), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find("key '" + key + "'"), std::string::npos) << key << ": " << e;
    fs::remove_tree(dir);
  }
}

TEST_F(PeftAdapterFiles, AcceptsKeysThatLeaveTheMath) {
  const std::vector<std::pair<std::string, Json>> accepted = {
      {"inference_mode", false},
      {"revision", "main"},
      {"auto_mapping", {{"base_model_class", "LlamaForCausalLM"}, {"parent_library", "transformers"}}},
      {"peft_version", "0.13.2"},
      {"layers_pattern", "layers"},
      {"megatron_core", "megatron.core"},
      {"qalora_group_size", 32},
      {"ensure_weight_tying", true},
      {"eva_config", {{"rho", 2.0}}},
      {"loftq_config", {{"loftq_bits", 4}}},
      {"velora_config", {{"num_groups", 8}}},
      {"init_lora_weights", false},
      {"init_lora_weights", "gaussian"},
      {"init_lora_weights", "orthogonal"},
      {"task_type", nullptr},
      {"target_modules", "all-linear"},
      {"a_later_peft_option", nullptr},
      {"another_later_option", Json::object()},
  };
  for (const auto& [key, value] : accepted) {
    const std::string dir = with_key(kLlama3, key, value);
    EXPECT_EQ(error_of([&] { read_peft_adapter(dir); }), "") << key << " = " << value.dump();
    fs::remove_tree(dir);
  }
  // An older peft's file (0.13 wrote none of the later keys) reads the same.
  const std::string old = copy_of(kLlama3);
  Json j = read_json(old + "/adapter_config.json");
  for (const char* later : {"alora_invocation_tokens", "arrow_config", "corda_config", "ensure_weight_tying",
                            "eva_config", "exclude_modules", "kasa_config", "lora_bias", "lora_ga_config",
                            "monteclora_config", "peft_version", "qalora_group_size", "target_parameters",
                            "trainable_token_indices", "use_bdlora", "use_qalora", "velora_config"})
    j.erase(later);
  write_json(old + "/adapter_config.json", j);
  EXPECT_EQ(read_peft_adapter(old).tensors.size(), read_peft_adapter(kLlama3).tensors.size());
}

TEST_F(PeftAdapterFiles, RefusesTensorsItCannotPlace) {
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj";
  struct Case {
    const char* what;
    std::function<void(std::map<std::string, at::Tensor>&)> edit;
    std::string key;  // the tensor the message must name
  };
  const std::vector<Case> cases = {
      {"shape against r", [&](auto& t) { t[q + ".lora_A.weight"] = at::zeros({8, 32}); }, q + ".lora_A.weight"},
      {"B's shape against r", [&](auto& t) { t[q + ".lora_B.weight"] = at::zeros({32, 2}); }, q + ".lora_B.weight"},
      {"not 2-D", [&](auto& t) { t[q + ".lora_A.weight"] = at::zeros({4 * 32}); }, q + ".lora_A.weight"},
      {"an A without its B", [&](auto& t) { t.erase(q + ".lora_B.weight"); }, q + ".lora_A.weight"},
      {"a B without its A", [&](auto& t) { t.erase(q + ".lora_A.weight"); }, q + ".lora_B.weight"},
      {"DoRA's magnitude", [&](auto& t) { t[q + ".lora_magnitude_vector"] = at::ones({32}); },
       q + ".lora_magnitude_vector"},
      {"the adapter's name kept", [&](auto& t) { t[q + ".lora_A.default.weight"] = t.at(q + ".lora_A.weight"); },
       q + ".lora_A.default.weight"},
      {"a module not saved", [&](auto& t) { t["base_model.model.model.norm.weight"] = at::ones({32}); },
       "base_model.model.model.norm.weight"},
      {"no peft prefix", [&](auto& t) { t["lm_head.weight"] = at::ones({320, 32}); }, "lm_head.weight"},
      {"integer dtype", [&](auto& t) { t[q + ".lora_A.weight"] = at::zeros({4, 32}, at::kInt); },
       q + ".lora_A.weight"},
  };
  for (const Case& c : cases) {
    const std::string dir = with_tensors(kLlama3, c.edit);
    const std::string e = error_of([&] { read_peft_adapter(dir); });
    EXPECT_NE(e.find(dir + "/adapter_model.safetensors: tensor '" + c.key + "'"), std::string::npos)
        << c.what << ": " << e;
    fs::remove_tree(dir);
  }
}

}  // namespace
