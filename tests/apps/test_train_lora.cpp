// stratum-train with a "lora" section: the adapters alone train, and every
// layout reproduces the single process step for step (losses within 1e-5
// relative in fp32): data parallel at ZeRO 0-3, tensor parallel with and
// without sequence parallelism (LLaMA's stacked q/k/v and gate/up, GPT-2's
// packed c_attn), pipeline stages; from a Hugging Face directory the base is
// loaded frozen, the checkpoint holds the adapters and resumes exactly; with
// the base in NF4 (QLoRA) the same across data and pipeline parallelism; a
// peft adapter starts a run, and its checkpoint exports as peft's files or
// merged into the base. Instruction data (chat and prompt-completion JSON
// Lines) trains packed, the loss on the answers only, at every layout alike.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "stratum/io/safetensors.h"
#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string write_config(const std::string& dir, const std::string& name, const std::string& extra,
                         const std::string& targets = R"("all-linear")") {
  const std::string path = dir + "/" + name + ".json";
  std::ofstream(path) << R"({"train_batch_size": 4, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "lora": {"r": 4, "lora_alpha": 8, "target_modules": )" + targets + "}" + extra + "}";
  return path;
}

std::string train(const std::string& dir, const std::string& config, int procs, const std::string& log,
                  const std::string& model_args, int steps = 6, const std::string& extra = "") {
  return kBin + "/stratum-run --num_procs " + std::to_string(procs) + " " + kBin + "/stratum-train --config " + config +
         " " + model_args + " --data default --cache-dir " + dir + "/cache --steps " + std::to_string(steps) +
         " --eval-every 100 --print-every 1 --sample-tokens 0 --log-dir " + dir + "/" + log + " " + extra;
}

void expect_same_losses(const std::string& dir, const std::string& log, const std::map<int, double>& want) {
  const auto got = losses(dir + "/" + log + "/metrics.csv");
  ASSERT_EQ(got.size(), want.size()) << log;
  for (const auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-5 * loss) << log << " step " << step;
}

const char* kLlama = "--model tiny-llama --set layers=2 --set max_seq_len=32 --set vocab_size=256 --set tie_embeddings=false";

}  // namespace

TEST_F(TrainCli, LoraMatchesTheSingleProcessAtEveryLayout) {
  Result r = run(train(dir_, write_config(dir_, "one", ""), 1, "one", kLlama));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA r 4, alpha 8 (scale 2): 14 layers adapted"), std::string::npos) << r.output;
  const auto reference = losses(dir_ + "/one/metrics.csv");
  ASSERT_EQ(reference.size(), 6u);
  EXPECT_LT(reference.at(6), reference.at(1));
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"zero0", R"(, "zero_optimization": {"stage": 0})"},
      {"zero1", R"(, "zero_optimization": {"stage": 1})"},
      {"zero2", R"(, "zero_optimization": {"stage": 2})"},
      {"zero3", R"(, "zero_optimization": {"stage": 3})"},
      {"tp", R"(, "tensor_parallel": {"autotp_size": 2})"},
      {"tp_sp", R"(, "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true})"},
      {"pp", R"(, "pipeline": {"stages": 2})"},
  };
  for (const auto& [name, extra] : layouts) {
    r = run(train(dir_, write_config(dir_, name, extra), 2, name, kLlama));
    ASSERT_EQ(r.status, 0) << name << "\n" << r.output;
    expect_same_losses(dir_, name, reference);
  }
  // GPT-2: c_attn's packed q, k, v cut in three blocks, its MLP with adapters between the GEMMs.
  const char* gpt2 = "--model tiny-gpt2 --set layers=2 --set max_seq_len=32 --set vocab_size=256";
  const std::string targets = R"(["c_attn", "c_proj", "c_fc"])";
  r = run(train(dir_, write_config(dir_, "gpt2_one", "", targets), 1, "gpt2_one", gpt2));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(train(dir_, write_config(dir_, "gpt2_tp", R"(, "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true})",
                                   targets),
                2, "gpt2_tp", gpt2));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_losses(dir_, "gpt2_tp", losses(dir_ + "/gpt2_one/metrics.csv"));
}

TEST_F(TrainCli, LoraOnAHuggingFaceDirectoryKeepsTheBaseFrozenAndResumes) {
  const std::string hf = std::string(STRATUM_SOURCE_DIR) + "/tests/data/hf/llama3";
  const std::string model = "--init-from " + hf + " --set max_seq_len=32";
  // ZeRO-3 over two ranks: the base is loaded a layer at a time into its partition.
  const std::string config = write_config(dir_, "lora", R"(, "zero_optimization": {"stage": 3})", R"(["q_proj", "v_proj"])");
  Result r = run(train(dir_, config, 2, "whole", model, 4));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("frozen base partitioned over 2 data-parallel ranks (ZeRO-3)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("initialized from " + hf), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4 layers adapted"), std::string::npos) << r.output;
  r = run(train(dir_, config, 2, "first", model, 2, "--save-dir " + dir_ + "/ckpt --save-every 2"));
  ASSERT_EQ(r.status, 0) << r.output;
  // The checkpoint holds the adapters (and their optimizer state) only.
  r = run(kBin + "/stratum-ckpt info " + dir_ + "/ckpt --tag global_step2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("8 tensors, 896 elements"), std::string::npos) << r.output;  // q and v of 2 layers, A and B
  // Resumed on one rank: the frozen base from --init-from again, the adapters from the checkpoint.
  r = run(train(dir_, config, 1, "resumed", model, 4, "--save-dir " + dir_ + "/ckpt --resume"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
  const auto whole = losses(dir_ + "/whole/metrics.csv"), resumed = losses(dir_ + "/resumed/metrics.csv");
  ASSERT_EQ(whole.size(), 4u);
  for (int step : {3, 4}) EXPECT_NEAR(resumed.at(step), whole.at(step), 1e-5 * whole.at(step)) << "step " << step;
}

TEST_F(TrainCli, QloraMatchesTheSingleProcessAcrossDataAndPipelineParallelism) {
  // base_dtype nf4: every rank quantizes the same whole weights (ZeRO-3
  // keeps 1/2 of their bytes and gathers a layer's as stored; a stage holds
  // its layers'), so the losses match to 1e-5.
  // Under tensor parallelism each rank quantizes its own piece (its own
  // blocks of 64 and their statistics): another rounding of the base, within
  // 1e-3 of the single process's.
  const std::string nf4 = R"("base_dtype": "nf4", )";
  auto config = [&](const std::string& name, const std::string& extra) {
    const std::string path = dir_ + "/" + name + ".json";
    std::ofstream(path) << R"({"train_batch_size": 4, "gradient_accumulation_steps": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "lora": {)" + nf4 + R"("r": 4, "lora_alpha": 8, "target_modules": "all-linear"})" + extra + "}";
    return path;
  };
  Result r = run(train(dir_, config("one", ""), 1, "one", kLlama));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto reference = losses(dir_ + "/one/metrics.csv");
  ASSERT_EQ(reference.size(), 6u);
  EXPECT_LT(reference.at(6), reference.at(1));
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::string>>{
           {"zero3", R"(, "zero_optimization": {"stage": 3})"}, {"pp", R"(, "pipeline": {"stages": 2})"}}) {
    r = run(train(dir_, config(name, extra), 2, name, kLlama));
    ASSERT_EQ(r.status, 0) << name << "\n" << r.output;
    expect_same_losses(dir_, name, reference);
    if (name == "zero3")
      EXPECT_NE(r.output.find("frozen base partitioned over 2 data-parallel ranks (ZeRO-3)"), std::string::npos)
          << r.output;
  }
  // Each stage's base partitioned over its data-parallel pair.
  r = run(train(dir_, config("pp-zero3", R"(, "pipeline": {"stages": 2}, "zero_optimization": {"stage": 3})"), 4,
                "pp-zero3", kLlama));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_losses(dir_, "pp-zero3", reference);
  EXPECT_NE(r.output.find("frozen base partitioned over 2 data-parallel ranks (ZeRO-3)"), std::string::npos)
      << r.output;
  r = run(train(dir_, config("tp", R"(, "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true})"), 2, "tp",
                kLlama));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto tp = losses(dir_ + "/tp/metrics.csv");
  ASSERT_EQ(tp.size(), 6u);
  for (const auto& [step, loss] : reference) EXPECT_NEAR(tp.at(step), loss, 1e-3 * loss) << "step " << step;
}

TEST_F(TrainCli, PeftAdapterStartsTheRunAndExportsAsPeftAndMerged) {
  // peft's adapter (tests/data/hf/llama3_lora) into two data-parallel ranks
  // at ZeRO-2; at lr 0 the exported adapter is peft's, tensor for tensor.
  const std::string hf = std::string(STRATUM_SOURCE_DIR) + "/tests/data/hf";
  const std::string model = "--init-from " + hf + "/llama3 --set max_seq_len=32 --lora-from " + hf + "/llama3_lora";
  auto config = [&](const std::string& name, int r) {
    const std::string path = dir_ + "/" + name + ".json";
    std::ofstream(path) << R"({"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 0}},
      "zero_optimization": {"stage": 2},
      "lora": {"r": )" + std::to_string(r) + R"(, "lora_alpha": 16, "use_rslora": true, "target_modules": "all-linear",
               "modules_to_save": ["lm_head"]}})";
    return path;
  };
  Result r = run(train(dir_, config("r8", 8), 2, "r8", model, 1));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("does not fit the config's lora section"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("r 4, the config's lora.r 8"), std::string::npos) << r.output;

  r = run(train(dir_, config("r4", 4), 2, "r4", model, 1, "--save-dir " + dir_ + "/ckpt --save-every 1"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("adapters from " + hf + "/llama3_lora (29 tensors)"), std::string::npos) << r.output;
  r = run(kBin + "/stratum-ckpt export " + dir_ + "/ckpt " + dir_ + "/adapter");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto exported = stratum::io::read_safetensors(dir_ + "/adapter/adapter_model.safetensors");
  const auto peft = stratum::io::read_safetensors(hf + "/llama3_lora/adapter_model.safetensors");
  ASSERT_EQ(exported.size(), peft.size());
  for (const auto& [name, t] : peft) {
    ASSERT_TRUE(exported.count(name)) << name;
    EXPECT_TRUE(at::equal(exported.at(name), t)) << name;
  }
  // Merged into the run's --init-from base, in bf16.
  r = run(kBin + "/stratum-ckpt export " + dir_ + "/ckpt " + dir_ + "/merged --merge-lora");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("merged 29 adapter tensors into " + hf + "/llama3"), std::string::npos) << r.output;
  EXPECT_EQ(stratum::io::read_safetensors_header(dir_ + "/merged/model.safetensors").tensors.front().dtype, "BF16");
}

namespace {

// Conversations whose answers follow from their questions, as a chat JSONL
// file; `prompt_completion`: the same as text prompt-completion records.
std::string write_instruction_data(const std::string& dir, bool prompt_completion) {
  const char* places[][2] = {{"France", "Paris"},   {"Italy", "Rome"},     {"Spain", "Madrid"},  {"Japan", "Tokyo"},
                             {"Egypt", "Cairo"},    {"Peru", "Lima"},      {"Kenya", "Nairobi"}, {"Chile", "Santiago"},
                             {"Norway", "Oslo"},    {"Cuba", "Havana"},    {"Iran", "Tehran"},   {"Mali", "Bamako"},
                             {"Nepal", "Kathmandu"}, {"Laos", "Vientiane"}, {"Fiji", "Suva"},     {"Oman", "Muscat"}};
  const std::string path = dir + (prompt_completion ? "/capitals_pc.jsonl" : "/capitals_chat.jsonl");
  std::ofstream out(path);
  for (int round = 0; round < 3; ++round)
    for (const auto& p : places) {
      const std::string question = std::string(round == 1 ? "Which city is the capital of " : "Capital of ") + p[0] + "?";
      const std::string answer = std::string(p[1]) + (round == 2 ? " is its capital." : ".");
      if (prompt_completion)
        out << R"({"prompt": ")" << question << R"( Answer:", "completion": " )" << answer << "\"}\n";
      else
        out << R"({"messages": [{"role": "user", "content": ")" << question
            << R"("}, {"role": "assistant", "content": ")" << answer << "\"}]}\n";
    }
  return path;
}

const std::string kChatTokenizer = std::string(STRATUM_SOURCE_DIR) + "/tests/data/chat_templates/llama3_chat";
const std::string kChatTemplate = std::string(STRATUM_SOURCE_DIR) + "/tests/data/chat_templates/llama-3.2-instruct.jinja";

std::string chat_train(const std::string& dir, const std::string& config, int procs, const std::string& log,
                       const std::string& model_args, const std::string& data, int steps = 6,
                       const std::string& extra = "") {
  return kBin + "/stratum-run --num_procs " + std::to_string(procs) + " " + kBin + "/stratum-train --config " + config +
         " " + model_args + " --tokenizer " + kChatTokenizer +
         (data.rfind("chat:", 0) == 0 ? " --chat-template " + kChatTemplate : std::string()) + " --data " + data +
         " --cache-dir " + dir + "/cache --steps " + std::to_string(steps) +
         " --eval-every 3 --eval-fraction 0.1 --print-every 1 --sample-tokens 0 --log-dir " + dir + "/" + log + " " +
         extra;
}

const char* kChatLlama = "--model tiny-llama --set layers=2 --set max_seq_len=128 --set vocab_size=1280 --set tie_embeddings=false";

}  // namespace

TEST_F(TrainCli, ChatDataTrainsPackedOnTheAnswersAtEveryLayout) {
  // Conversations rendered with Llama 3.2's template, packed into rows whose
  // examples never see each other; the loss on the assistant turns only.
  // Every layout reproduces the single process (1e-5), the packed layout
  // travelling with each micro-batch to every pipeline stage and through
  // sequence parallelism's gathered attention.
  const std::string data = "chat:" + write_instruction_data(dir_, false);
  Result r = run(chat_train(dir_, write_config(dir_, "one", ""), 1, "one", kChatLlama, data, 12));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("examples, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("packed into"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokenized " + dir_ + "/capitals_chat.jsonl (chat): 48 examples"), std::string::npos)
      << r.output;
  const auto reference = losses(dir_ + "/one/metrics.csv");
  ASSERT_EQ(reference.size(), 12u);
  // A short fine-tune lowers the held-out loss on the answers.
  const auto held_out = metric(dir_ + "/one/metrics.csv", 2);  // eval_loss
  ASSERT_TRUE(held_out.count(3) && held_out.count(12)) << r.output;
  EXPECT_LT(held_out.at(12), held_out.at(3));
  std::map<int, double> first_six(reference.begin(), reference.find(7));
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::string>>{
           {"zero3", R"(, "zero_optimization": {"stage": 3})"},
           {"tp_sp", R"(, "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true})"},
           {"pp", R"(, "pipeline": {"stages": 2, "activation_checkpoint_interval": 1})"}}) {
    r = run(chat_train(dir_, write_config(dir_, name, extra), 2, name, kChatLlama, data));
    ASSERT_EQ(r.status, 0) << name << "\n" << r.output;
    expect_same_losses(dir_, name, first_six);
  }
}

TEST_F(TrainCli, PromptCompletionDataTrainsGpt2PackedUnderSequenceParallelism) {
  // GPT-2's learned positions restart with each packed example, under
  // sequence parallelism too (each rank's slice of the row's positions).
  const std::string data = "prompt-completion:" + write_instruction_data(dir_, true);
  const char* gpt2 = "--model tiny-gpt2 --set layers=2 --set max_seq_len=64 --set vocab_size=1280";
  const std::string targets = R"(["c_attn", "c_proj", "c_fc"])";
  Result r = run(chat_train(dir_, write_config(dir_, "one", "", targets), 1, "one", gpt2, data));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(prompt-completion): 48 examples"), std::string::npos) << r.output;
  r = run(chat_train(dir_, write_config(dir_, "tp", R"(, "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true})",
                                        targets),
                     2, "tp", gpt2, data));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_losses(dir_, "tp", losses(dir_ + "/one/metrics.csv"));
}

TEST_F(TrainCli, InstructionDataInTheWrongFormIsRefusedByLine) {
  const std::string chat = write_instruction_data(dir_, false);
  Result r = run(chat_train(dir_, write_config(dir_, "one", ""), 1, "one", kChatLlama, "prompt-completion:" + chat, 1));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find(chat + ":1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("give it as chat:FILE"), std::string::npos) << r.output;
  r = run(chat_train(dir_, write_config(dir_, "one", ""), 1, "one", kChatLlama, "chat:" + chat + " default", 1));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("instruction data is one file alone"), std::string::npos) << r.output;
  // A chat template is read only for chat data: given with other data, it is refused rather than ignored.
  r = run(chat_train(dir_, write_config(dir_, "one", ""), 1, "one", kChatLlama,
                     "prompt-completion:" + write_instruction_data(dir_, true), 1, "--chat-template " + kChatTemplate));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("only chat:FILE data is rendered with a chat template"), std::string::npos) << r.output;
}

TEST_F(TrainCli, QloraFromABitsandbytesCheckpointTrainsOnItsStoredCodes) {
  // tests/data/hf/llama3_bnb4 is llama3 saved by bitsandbytes in 4 bits (its
  // block linears in NF4 from bf16). In bf16, QLoRA from it and QLoRA from
  // the dense llama3 (quantized here, bit for bit as bitsandbytes does) hold
  // the same codes: the same losses (1e-6). Data-parallel ranks at ZeRO-3
  // take the codes as stored, a layer at a time, and keep half of their bytes
  // (within 2e-4: bf16 gradients summed in another order);
  // tensor-parallel ranks dequantize the weight and quantize their piece
  // (within 1e-2 of the single process's).
  const std::string hf = std::string(STRATUM_SOURCE_DIR) + "/tests/data/hf";
  auto config = [&](const std::string& name, const std::string& extra) {
    const std::string path = dir_ + "/" + name + ".json";
    std::ofstream(path) << R"({"train_batch_size": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "lora": {"base_dtype": "nf4", "r": 4, "lora_alpha": 8, "target_modules": "all-linear"})" + extra + "}";
    return path;
  };
  Result r = run(train(dir_, config("dense", ""), 1, "dense", "--init-from " + hf + "/llama3 --set max_seq_len=32"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(train(dir_, config("bnb", ""), 1, "bnb", "--init-from " + hf + "/llama3_bnb4 --set max_seq_len=32"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto dense = losses(dir_ + "/dense/metrics.csv"), bnb = losses(dir_ + "/bnb/metrics.csv");
  ASSERT_EQ(bnb.size(), 6u);
  for (const auto& [step, loss] : dense) EXPECT_NEAR(bnb.at(step), loss, 1e-6 * loss) << "step " << step;
  r = run(train(dir_, config("zero3", R"(, "zero_optimization": {"stage": 3})"), 2, "zero3",
                "--init-from " + hf + "/llama3_bnb4 --set max_seq_len=32"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("frozen base partitioned over 2 data-parallel ranks (ZeRO-3)"), std::string::npos)
      << r.output;
  const auto zero3 = losses(dir_ + "/zero3/metrics.csv");  // bf16 gradients summed in another order
  for (const auto& [step, loss] : bnb) EXPECT_NEAR(zero3.at(step), loss, 2e-4 * loss) << "step " << step;
  r = run(train(dir_, config("tp", R"(, "tensor_parallel": {"autotp_size": 2})"), 2, "tp",
                "--init-from " + hf + "/llama3_bnb4 --set max_seq_len=32"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto tp = losses(dir_ + "/tp/metrics.csv");
  for (const auto& [step, loss] : bnb) EXPECT_NEAR(tp.at(step), loss, 1e-2 * loss) << "step " << step;
  // Merged (at lr 0 the adapters add nothing): each 4-bit weight is its stored codes dequantized, bitsandbytes' values.
  const std::string still = dir_ + "/still.json";
  std::ofstream(still) << R"({"train_batch_size": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.0}},
    "lora": {"base_dtype": "nf4", "r": 4, "lora_alpha": 8, "target_modules": "all-linear"}})";
  r = run(train(dir_, still, 1, "still", "--init-from " + hf + "/llama3_bnb4 --set max_seq_len=32", 1,
                "--save-dir " + dir_ + "/ckpt"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(kBin + "/stratum-ckpt export " + dir_ + "/ckpt " + dir_ + "/merged --merge-lora");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("dequantized NF4, as trained"), std::string::npos) << r.output;
  const auto merged = stratum::io::read_safetensors(dir_ + "/merged/model.safetensors");
  const auto bnb_values = stratum::io::read_safetensors(hf + "/llama3_bnb4/dequantized.safetensors");
  for (const auto& [name, value] : bnb_values) EXPECT_TRUE(at::equal(merged.at(name), value)) << name;
  // Without a lora section the 4-bit weights would have to train: refused by name.
  const std::string plain = dir_ + "/plain.json";
  std::ofstream(plain) << R"({"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})";
  r = run(train(dir_, plain, 1, "plain", "--init-from " + hf + "/llama3_bnb4 --set max_seq_len=32", 1));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("stored in bitsandbytes' 4-bit NF4"), std::string::npos) << r.output;
}
