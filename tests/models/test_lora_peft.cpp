// Adapters people use elsewhere: an adapter peft 0.21.2 saved (tests/data/hf/
// make_peft_fixtures.py: GPT-2 with c_attn/c_proj/c_fc, r 4; Llama-3 shape with
// all seven projections, rsLoRA and lm_head in modules_to_save) loads onto
// the same Hugging Face base in Stratum with peft's logits within 1e-5; the
// adapter merged into the base (peft's merge_and_unload) gives the adapted
// model's logits; an adapter that does not fit the config is refused naming
// what differs.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/checkpoint/peft_adapter.h"
#include "stratum/io/safetensors.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/hf_config.h"
#include "stratum/models/hf_state_dict.h"
#include "stratum/models/lora.h"

using namespace stratum;
using namespace stratum::models;

namespace {

const std::string kFixtures = std::string(STRATUM_TEST_DATA_DIR) + "/hf";

std::shared_ptr<CausalLMImpl> base_model(const std::string& name) {
  const std::string dir = kFixtures + "/" + name;
  auto model = build_model(read_hf_model_config(dir));
  load_hf_state_dict(*model, read_hf_checkpoint(dir), dir);
  model->eval();
  return model;
}

// The base with peft's adapter applied and loaded.
std::shared_ptr<CausalLMImpl> adapted_model(const std::string& name, PeftAdapter& adapter) {
  auto model = base_model(name);
  adapter = read_peft_adapter(kFixtures + "/" + name + "_lora");
  apply_lora(*model, adapter.lora);
  const auto problems = adapter_mismatches(*model, adapter.lora, adapter.lora, adapter.tensors);
  EXPECT_TRUE(problems.empty()) << problems.front();
  const auto params = model->named_parameters();
  c10::AutoGradMode no_grad(false);
  for (const auto& [n, t] : adapter.tensors) params.find(n)->copy_(t);
  return model;
}

void expect_peft_logits(const std::string& name) {
  SCOPED_TRACE(name);
  PeftAdapter adapter;
  auto model = adapted_model(name, adapter);
  const auto want = io::read_safetensors(kFixtures + "/" + name + "_lora/peft_logits.safetensors");
  const at::Tensor got = model->logits(want.at("input_ids"));
  const at::Tensor& logits = want.at("logits");
  EXPECT_LT((got.to(at::kFloat) - logits).abs().max().item<double>(), 1e-5);
  // The adapter moves the logits far beyond that bound: the comparison sees it.
  EXPECT_GT((base_model(name)->logits(want.at("input_ids")) - logits).abs().max().item<double>(), 0.1);

  // Merged into the base (W + scale·B·A in fp32): the adapted model's logits.
  auto merged = base_model(name);
  merge_lora(*merged, adapter.lora, std::map<std::string, at::Tensor>(adapter.tensors.begin(), adapter.tensors.end()));
  EXPECT_LT((merged->logits(want.at("input_ids")) - got).abs().max().item<double>(), 1e-5);
}

}  // namespace

TEST(LoraPeft, Gpt2AdapterFromPeftGivesPeftsLogitsAndMerges) { expect_peft_logits("gpt2"); }

TEST(LoraPeft, Llama3AdapterWithRsLoraAndModulesToSaveGivesPeftsLogitsAndMerges) { expect_peft_logits("llama3"); }

TEST(LoraPeft, AdapterThatDoesNotFitTheConfigIsRefusedNamingWhatDiffers) {
  PeftAdapter adapter = read_peft_adapter(kFixtures + "/llama3_lora");
  auto model = base_model("llama3");
  config::LoraConfig run = adapter.lora;
  run.r = 8;
  run.modules_to_save.clear();
  run.target_modules = {"q_proj", "v_proj"};
  apply_lora(*model, run);
  const auto problems = adapter_mismatches(*model, run, adapter.lora, adapter.tensors);
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_NE(all.find("r 4, the config's lora.r 8"), std::string::npos) << all;
  EXPECT_NE(all.find("'lm_head.weight' is not a parameter the config's lora section trains"), std::string::npos) << all;
  EXPECT_NE(all.find("'model.layers.0.self_attn.q_proj.lora_A.weight' is [4, 32], the model's [8, 32]"),
            std::string::npos)
      << all;
}
