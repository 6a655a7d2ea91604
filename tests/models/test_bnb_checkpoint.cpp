// A checkpoint saved from a bitsandbytes 4-bit model (tests/data/hf/llama3_bnb4,
// written by make_bnb_fixture.py with bitsandbytes 0.50.2): its block linears
// read as stored in NF4, each dequantizing to exactly what bitsandbytes'
// dequantize_4bit gives; the dense rest as any checkpoint's; the config's
// quantization_config checked, other schemes refused by key.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"
#include "../common/error_of.h"

using namespace stratum;
using namespace stratum::models;
using stratum::test::error_of;

namespace {

const std::string kDir = std::string(STRATUM_TEST_DATA_DIR) + "/hf/llama3_bnb4";

TEST(BitsandbytesCheckpoint, BlockLinearsReadAsStoredAndDequantizeAsBitsandbytesDoes) {
  const ModelConfig c = read_hf_model_config(kDir);
  auto model = construct_model(c, {}, c10::kMeta);
  const auto tensors = read_hf_checkpoint(kDir);
  const HfParameters p = hf_parameters(*model, tensors, kDir);
  EXPECT_EQ(p.nf4.size(), 14u);  // 7 projections x 2 layers
  EXPECT_TRUE(p.whole.count("model.embed_tokens.weight"));
  EXPECT_TRUE(p.whole.count("lm_head.weight"));
  EXPECT_FALSE(p.whole.count("model.layers.0.self_attn.q_proj.weight"));
  const auto reference = io::read_safetensors(kDir + "/dequantized.safetensors");
  for (const auto& [name, q] : p.nf4) {
    EXPECT_TRUE(q.nested) << name;
    EXPECT_EQ(q.dtype, at::kBFloat16) << name;
    EXPECT_TRUE(torch::equal(quant::dequantize_nf4(q), reference.at(name))) << name;
  }
  // Read as float weights, a quantized checkpoint is refused with what to do instead.
  const std::string e = error_of([&] { hf_whole_parameters(*model, tensors, kDir); });
  EXPECT_NE(e.find("stored in bitsandbytes' 4-bit NF4"), std::string::npos) << e;
  EXPECT_NE(e.find("frozen base of LoRA"), std::string::npos) << e;
}

TEST(BitsandbytesCheckpoint, OtherQuantizationSchemesAreRefusedByKey) {
  const std::string text = fs::read_regular_file(kDir + "/config.json", 1 << 20, "config");
  auto config_with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    return nlohmann::json::parse(t);
  };
  EXPECT_NO_THROW(model_config_from_hf(nlohmann::json::parse(text), "bnb"));
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{R"("quant_method": "bitsandbytes")", R"("quant_method": "gptq")"}, "quantization_config.quant_method"},
      {{R"("bnb_4bit_quant_type": "nf4")", R"("bnb_4bit_quant_type": "fp4")"}, "quantization_config.bnb_4bit_quant_type"},
      {{R"("load_in_8bit": false)", R"("load_in_8bit": true)"}, "quantization_config.load_in_8bit"},
  };
  for (const auto& [edit, key] : cases) {
    const std::string e = error_of([&] { model_config_from_hf(config_with(edit.first, edit.second), "bnb"); });
    EXPECT_NE(e.find(key), std::string::npos) << edit.second << ": " << e;
  }
}

}  // namespace
