// Hugging Face export/import (Conv1D transposition, tied heads, GPT2Model-style
// names, every error by tensor name), a full safetensors round trip of a model,
// generation (greedy, seeded sampling, cropping), and that the tiny models learn.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/generate.h"
#include "stratum/models/hf_state_dict.h"

using namespace stratum;
using namespace stratum::models;

namespace {

std::map<std::string, at::Tensor> as_map(const std::vector<std::pair<std::string, at::Tensor>>& v) {
  return {v.begin(), v.end()};
}

std::string load_error(CausalLMImpl& model, const std::map<std::string, at::Tensor>& tensors) {
  try {
    load_hf_state_dict(model, tensors, "file.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

at::Tensor some_tokens(int64_t seed, int64_t T = 12) {
  torch::manual_seed(seed);
  return torch::randint(256, {2, T}, torch::kLong);
}

}  // namespace

TEST(HfStateDict, Gpt2Conv1DWeightsAreTransposed) {
  auto model = build_model(preset("tiny-gpt2"));
  const auto hf = as_map(to_hf_state_dict(*model));
  auto params = model->named_parameters();
  EXPECT_EQ(hf.at("transformer.h.0.attn.c_attn.weight").sizes(), (std::vector<int64_t>{64, 192}));  // [in, out]
  EXPECT_EQ(hf.at("transformer.h.0.mlp.c_fc.weight").sizes(), (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(hf.at("transformer.h.0.mlp.c_proj.weight").sizes(), (std::vector<int64_t>{256, 64}));
  EXPECT_TRUE(torch::equal(hf.at("transformer.h.1.attn.c_proj.weight"), params["transformer.h.1.attn.c_proj.weight"].t()));
  EXPECT_TRUE(torch::equal(hf.at("transformer.wte.weight"), params["transformer.wte.weight"]));  // embeddings as they are
  EXPECT_TRUE(hf.at("transformer.h.0.attn.c_attn.weight").is_contiguous());
  EXPECT_EQ(hf.count("lm_head.weight"), 0u);  // tied: HF files leave it out
  EXPECT_TRUE(is_hf_conv1d_weight(model->config(), "transformer.h.3.mlp.c_fc.weight"));
  EXPECT_FALSE(is_hf_conv1d_weight(preset("tiny-llama"), "model.layers.0.mlp.down_proj.weight"));
}

TEST(HfStateDict, ModelsRoundTripThroughSafetensors) {
  const std::string dir = fs::make_temp_directory("stratum-hf-");
  for (const auto& overrides : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {}, {{"tie_embeddings", "false"}}}) {
    for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
      SCOPED_TRACE(std::string(name) + (overrides.empty() ? " tied" : " untied"));
      const ModelConfig c = make_model_config(name, overrides);
      torch::manual_seed(1);
      auto a = build_model(c);
      torch::manual_seed(2);
      auto b = build_model(c);
      const std::string file = dir + "/model.safetensors";
      io::write_safetensors(file, to_hf_state_dict(*a));
      load_hf_state_dict(*b, io::read_safetensors(file), file);
      const at::Tensor tokens = some_tokens(3);
      EXPECT_TRUE(torch::equal(a->logits(tokens), b->logits(tokens)));
      EXPECT_EQ(io::read_safetensors_header(file).tensors.size(), a->parameters().size());
    }
  }
  fs::remove_tree(dir);
}

TEST(HfStateDict, LoadsIntoOtherDtypes) {
  torch::manual_seed(4);
  auto a = build_model(preset("tiny-llama"));
  auto b = build_model(preset("tiny-llama"));
  for (auto& p : b->parameters()) p.set_data(p.to(torch::kBFloat16));
  load_hf_state_dict(*b, as_map(to_hf_state_dict(*a)));
  EXPECT_EQ(b->parameters()[0].scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(b->parameters()[0], a->parameters()[0].to(torch::kBFloat16)));
}

TEST(HfStateDict, AcceptsHubStyleGpt2FilesAndTiedHeads) {
  torch::manual_seed(5);
  auto a = build_model(preset("tiny-gpt2"));
  auto b = build_model(preset("tiny-gpt2"));
  // The hub's gpt2 files: saved from GPT2Model (no "transformer." prefix), with
  // attention-mask buffers, sometimes with the tied lm_head.weight.
  std::map<std::string, at::Tensor> hub;
  for (auto& [name, t] : to_hf_state_dict(*a)) hub[name.substr(std::string("transformer.").size())] = t;
  hub["h.0.attn.bias"] = torch::ones({1, 1, 64, 64});
  hub["h.0.attn.masked_bias"] = torch::tensor(-1e4);
  hub["lm_head.weight"] = hub["wte.weight"].clone();
  load_hf_state_dict(*b, hub);
  EXPECT_TRUE(torch::equal(a->logits(some_tokens(6)), b->logits(some_tokens(6))));
  hub["lm_head.weight"] = hub["wte.weight"] + 1;
  expect_contains(load_error(*b, hub), "'lm_head.weight' differs from the token embedding");
}

TEST(HfStateDict, ErrorsNameEveryBadTensor) {
  auto model = build_model(preset("tiny-gpt2"));
  auto tensors = as_map(to_hf_state_dict(*model));
  tensors.erase("transformer.h.1.ln_2.bias");
  tensors["transformer.h.0.attn.c_attn.weight"] = tensors["transformer.h.0.attn.c_attn.weight"].t();  // [out, in]: wrong
  tensors["transformer.h.9.mlp.c_fc.weight"] = torch::zeros({2});
  const std::string msg = load_error(*model, tensors);
  expect_contains(msg, "file.safetensors: cannot load into model 'tiny-gpt2'");
  expect_contains(msg, "missing 'transformer.h.1.ln_2.bias'");
  expect_contains(msg, "'transformer.h.0.attn.c_attn.weight' has shape [192, 64], expected [64, 192]");
  expect_contains(msg, "unexpected 'transformer.h.9.mlp.c_fc.weight'");
}

TEST(HfStateDict, ReadsSingleAndShardedCheckpoints) {
  const std::string dir = fs::make_temp_directory("stratum-hf-shards-");
  torch::manual_seed(11);
  auto a = build_model(preset("tiny-llama"));
  auto tensors = to_hf_state_dict(*a);
  // Two shards and the hub's index.
  const size_t half = tensors.size() / 2;
  io::write_safetensors(dir + "/model-00001-of-00002.safetensors", {tensors.begin(), tensors.begin() + half});
  io::write_safetensors(dir + "/model-00002-of-00002.safetensors", {tensors.begin() + half, tensors.end()});
  std::string map;
  for (size_t i = 0; i < tensors.size(); ++i)
    map += std::string(i ? "," : "") + "\"" + tensors[i].first + "\": \"model-0000" + (i < half ? "1" : "2") +
           "-of-00002.safetensors\"";
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"metadata\": {}, \"weight_map\": {" << map << "}}";
  auto b = build_model(preset("tiny-llama"));
  load_hf_state_dict(*b, read_hf_checkpoint(dir), dir);
  EXPECT_TRUE(torch::equal(a->logits(some_tokens(12)), b->logits(some_tokens(12))));
  // A shard gone is named.
  fs::remove_tree(dir + "/model-00002-of-00002.safetensors");
  try {
    read_hf_checkpoint(dir);
    ADD_FAILURE();
  } catch (const Error& e) {
    expect_contains(e.what(), "model-00002-of-00002.safetensors: cannot open");
  }
  // A single file wins over an index.
  io::write_safetensors(dir + "/model.safetensors", tensors);
  EXPECT_EQ(read_hf_checkpoint(dir).size(), tensors.size());
  fs::remove_tree(dir);
  EXPECT_THROW(read_hf_checkpoint(dir), Error);
}

TEST(Generate, GreedyIsArgmaxAndSamplingIsSeeded) {
  torch::manual_seed(7);
  auto model = build_model(preset("tiny-llama"));
  const std::vector<int64_t> prompt = {1, 2, 3};
  const auto greedy = generate(*model, prompt, 5, 0.0, 0, 0);
  ASSERT_EQ(greedy.size(), 8u);
  EXPECT_EQ(std::vector<int64_t>(greedy.begin(), greedy.begin() + 3), prompt);
  // Greedy by hand.
  std::vector<int64_t> manual = prompt;
  {
    c10::AutoGradMode no_grad(false);
    for (int i = 0; i < 5; ++i) {
      const at::Tensor in = torch::tensor(manual, torch::kLong).view({1, -1});
      manual.push_back(model->logits(in)[0][-1].argmax().item<int64_t>());
    }
  }
  EXPECT_EQ(greedy, manual);

  const auto s1 = generate(*model, prompt, 20, 1.0, 0, 42);
  const auto s2 = generate(*model, prompt, 20, 1.0, 0, 42);
  const auto s3 = generate(*model, prompt, 20, 1.0, 0, 43);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1, s3);
  // top_k 1 is greedy whatever the temperature.
  EXPECT_EQ(generate(*model, prompt, 5, 2.0, 1, 9), greedy);
}

TEST(Generate, CropsToMaxSeqLenAndRestoresTrainingMode) {
  auto model = build_model(preset("tiny-gpt2"));  // max_seq_len 64
  model->train();
  std::vector<int64_t> prompt(70, 5);
  const auto out = generate(*model, prompt, 3, 0.8, 10, 1);
  EXPECT_EQ(out.size(), 73u);
  EXPECT_TRUE(model->is_training());
  EXPECT_TRUE(model->layer(1).is_training());
  EXPECT_THROW(generate(*model, {}, 3, 0.0, 0, 0), Error);
  EXPECT_THROW(generate(*model, {1, 256}, 3, 0.0, 0, 0), Error);
}

TEST(Training, TinyModelsLearnAFixedBatch) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    SCOPED_TRACE(name);
    torch::manual_seed(8);
    auto model = build_model(preset(name));
    const at::Tensor data = torch::randint(256, {4, 33}, torch::kLong);
    const at::Tensor tokens = data.narrow(1, 0, 32), targets = data.narrow(1, 1, 32);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(3e-3));
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
      adam.zero_grad();
      at::Tensor loss = model->forward(tokens, targets);
      loss.backward();
      adam.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_NEAR(first, std::log(256.0), 0.3);  // uniform guess at init
    EXPECT_LT(last, 0.6 * first) << "first " << first << " last " << last;
  }
}

TEST(Training, DropoutOnlyWhileTraining) {
  torch::manual_seed(9);
  auto model = build_model(make_model_config("tiny-gpt2", {{"dropout", "0.5"}}));
  const at::Tensor tokens = some_tokens(10);
  model->eval();
  EXPECT_TRUE(torch::equal(model->logits(tokens), model->logits(tokens)));
  model->train();
  EXPECT_FALSE(torch::equal(model->logits(tokens), model->logits(tokens)));
}

TEST(Training, Bf16ForwardAndBackwardStayCloseToFp32) {
  // What the engine does for bf16: parameters cast in place (set_data keeps
  // their identity, so the tied head still reads the embedding).
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    SCOPED_TRACE(name);
    torch::manual_seed(10);
    auto model = build_model(preset(name));
    const at::Tensor data = torch::randint(256, {2, 17}, torch::kLong);
    const at::Tensor tokens = data.narrow(1, 0, 16), targets = data.narrow(1, 1, 16);
    const double fp32 = model->forward(tokens, targets).item<double>();
    {
      c10::AutoGradMode no_grad(false);
      for (auto& p : model->parameters()) p.set_data(p.to(torch::kBFloat16));
    }
    const at::Tensor loss = model->forward(tokens, targets);
    EXPECT_EQ(loss.scalar_type(), torch::kFloat);
    EXPECT_EQ(model->logits(tokens).scalar_type(), torch::kBFloat16);
    EXPECT_NEAR(loss.item<double>(), fp32, 0.02);
    loss.backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_EQ(p.value().grad().scalar_type(), torch::kBFloat16) << p.key();
      EXPECT_TRUE(p.value().grad().isfinite().all().item<bool>()) << p.key();
    }
  }
}
