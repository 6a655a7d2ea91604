// Instruction data against TRL's and transformers' behaviour (fixtures of
// tests/data/chat_templates/make_fixtures.py): conversation ids and
// assistant-only loss masks, prompt-completion ids and completion masks;
// then the JSON Lines reader and its cache, errors naming file:line, the
// packing policy, packed batches and the sampler over packed rows.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/chat_format_file.h"
#include "stratum/data/instruction_data.h"
#include "stratum/data/instruction_file.h"
#include <set>

#include "stratum/data/load_tokenizer.h"
#include "stratum/data/packed_batch.h"
#include "stratum/data/packed_sampler.h"
#include "stratum/data/packing.h"
#include "stratum/data/training_source.h"
#include "temp_dir.h"

#include "chat_fixtures.h"

namespace stratum::data {
namespace {

using json = nlohmann::ordered_json;

const std::string& kDir = test::kChatDir;
using test::slurp;

const json& cases() { return test::chat_cases(); }

const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[name];
  if (!t) t = load_tokenizer(kDir + "/" + name);
  return *t;
}

ChatFormat chat_format(const std::string& template_name, const json& variables) {
  ChatFormat f;
  f.chat_template = std::make_shared<ChatTemplate>(slurp(kDir + "/" + template_name + ".jinja"), template_name + ".jinja");
  f.variables_json = variables.dump();
  return f;
}

std::vector<uint8_t> mask_of(const json& j) {
  std::vector<uint8_t> m;
  for (const auto& v : j) m.push_back(static_cast<uint8_t>(v.get<int>()));
  return m;
}

TEST(InstructionData, ConversationIdsAndAssistantMasksMatchTransformersPrefixRendering) {
  int checked = 0;
  for (const json& c : cases()) {
    if (c["template"].is_null() || !c.contains("loss_mask")) continue;
    SCOPED_TRACE(c["template"].get<std::string>() + "/" + c["name"].get<std::string>());
    const ChatFormat format = chat_format(c["template"], c["variables"]);
    InstructionStats stats;
    const InstructionExample ex =
        tokenize_conversation(c["messages"], nullptr, tokenizer(c["tokenizer"]), format, "case", &stats);
    EXPECT_EQ(ex.tokens, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(ex.loss_mask, mask_of(c["loss_mask"]));
    ++checked;
  }
  EXPECT_EQ(checked, 34);  // Llama-3.1 (12), Llama-3.2 (11), Qwen2.5 (11) conversations ending on an assistant turn
}

TEST(InstructionData, PromptCompletionMatchesTrlIdsAndCompletionMask) {
  int checked = 0;
  for (const json& c : cases()) {
    if (!c["template"].is_null()) continue;
    SCOPED_TRACE(c["tokenizer"].get<std::string>() + ": " + c["record"].dump());
    const InstructionExample ex = tokenize_instruction_record(c["record"].dump(), tokenizer(c["tokenizer"]), nullptr, "rec");
    EXPECT_EQ(ex.tokens, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(ex.loss_mask, mask_of(c["loss_mask"]));
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

class InstructionFiles : public testing::TempDirTest {};

json qwen_variables() { return json{{"eos_token", "<|im_end|>"}}; }

TEST_F(InstructionFiles, JsonlTokenizedOnceIntoACacheOfTokensMasksAndOffsets) {
  const std::string source = path("sft.jsonl");
  const std::string lines[] = {
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]})",
      R"({"prompt": "2 + 2 =", "completion": " 4"})",
      "",
      R"({"prompt": [{"role": "user", "content": "Capital of France?"}], "completion": [{"role": "assistant", "content": "Paris."}]})",
      R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Köln"}}}]}, {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}], "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]})"};
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  testing::write_text(source, text);
  const ChatFormat format = chat_format("qwen2.5-instruct", qwen_variables());
  const Tokenizer& tok = tokenizer("qwen_chat");
  InstructionStats stats;
  const std::string cache = prepare_instruction_data(source, tok, &format, {path("cache"), true}, &stats);
  EXPECT_EQ(stats.examples, 4);
  const InstructionFile file(cache);
  ASSERT_EQ(file.size(), 4);
  EXPECT_EQ(file.info().tokenizer_name, tok.name());
  EXPECT_EQ(file.info().tokens, stats.tokens);
  int line_index = 0;
  for (int64_t i = 0; i < file.size(); ++i, ++line_index) {
    if (lines[line_index].empty()) ++line_index;
    const InstructionExample expected = tokenize_instruction_record(lines[line_index], tok, &format, "x");
    std::vector<int64_t> tokens(static_cast<size_t>(file.length(i)));
    std::vector<uint8_t> mask(tokens.size());
    file.read(i, 0, file.length(i), tokens.data(), mask.data());
    EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.end()), expected.tokens) << "example " << i;
    EXPECT_EQ(mask, expected.loss_mask) << "example " << i;
  }
  // The conversational prompt-completion trains on the completion's render only.
  std::vector<int64_t> t(static_cast<size_t>(file.length(2)));
  std::vector<uint8_t> m(t.size());
  file.read(2, 0, file.length(2), t.data(), m.data());
  std::vector<int32_t> trained;
  for (size_t k = 0; k < t.size(); ++k)
    if (m[k]) trained.push_back(static_cast<int32_t>(t[k]));
  EXPECT_EQ(tok.decode(trained), "Paris.<|im_end|>\n");

  // Fresh: not rebuilt (stats stay zero); another chat format is another cache.
  InstructionStats again;
  EXPECT_EQ(prepare_instruction_data(source, tok, &format, {path("cache"), true}, &again), cache);
  EXPECT_EQ(again.examples, 0);
  const ChatFormat other = chat_format("qwen2.5-instruct", json{{"eos_token", "<|im_end|>"}, {"x", 1}});
  EXPECT_NE(instruction_cache_path(source, tok, &other, path("cache")), cache);
  // A rank that may not write only learns the path.
  EXPECT_EQ(prepare_instruction_data(source, tok, &other, {path("cache"), false}), instruction_cache_path(source, tok, &other, path("cache")));
  EXPECT_FALSE(fs::exists(instruction_cache_path(source, tok, &other, path("cache"))));
}

TEST_F(InstructionFiles, ChatFormatLoadsFromTokenizerConfigAsTransformersDoes) {
  const std::string qwen = slurp(kDir + "/qwen2.5-instruct.jinja");
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}])");
  testing::write_text(path("tokenizer_config.json"),
                      json{{"bos_token", nullptr}, {"eos_token", {{"content", "<|im_end|>"}, {"lstrip", false}}},
                           {"pad_token", "<|endoftext|>"}, {"chat_template", qwen}}
                          .dump());
  const ChatFormat a = load_chat_format(path("tokenizer_config.json"));
  EXPECT_EQ(json::parse(a.variables_json), (json{{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}}));
  const std::string expected = ChatTemplate(qwen).render(messages, false, json::parse(a.variables_json));
  EXPECT_EQ(a.chat_template->render(messages, false, json::parse(a.variables_json)), expected);
  // A list of named templates: "default" is taken.
  testing::write_text(path("tokenizer_config.json"),
                      json{{"chat_template", json::array({json{{"name", "tool_use"}, {"template", "T"}},
                                                          json{{"name", "default"}, {"template", "D"}}})}}
                          .dump());
  EXPECT_EQ(load_chat_format(path("tokenizer_config.json")).chat_template->render(messages, false), "D");
  // chat_template.jinja beside it wins, as in transformers 5.
  testing::write_text(path("chat_template.jinja"), "J{{ messages | length }}");
  EXPECT_EQ(load_chat_format(path("tokenizer_config.json")).chat_template->render(messages, false), "J2");
  fs::remove_tree(path("chat_template.jinja"));
  testing::write_text(path("tokenizer_config.json"), "{\"eos_token\": \"x\"}");
  EXPECT_THROW(load_chat_format(path("tokenizer_config.json")), Error);
  testing::write_text(path("tokenizer_config.json"), "{\"chat_template\": \"{% if %}\"}");
  try {
    load_chat_format(path("tokenizer_config.json"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json chat_template line 1, column"), std::string::npos) << e.what();
  }
}

std::string error_of(const std::string& line, const std::string& template_name = "qwen2.5-instruct",
                     const json& variables = qwen_variables()) {
  const ChatFormat format = chat_format(template_name, variables);
  try {
    tokenize_instruction_record(line, tokenizer("qwen_chat"), &format, "d.jsonl:7 (byte 99)");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(InstructionData, EveryBadRecordIsAnErrorNamingTheLine) {
  EXPECT_NE(error_of("{\"messages\": [").find("d.jsonl:7 (byte 99)"), std::string::npos);
  EXPECT_NE(error_of("{\"messages\": [").find("not a JSON Lines record"), std::string::npos);
  EXPECT_NE(error_of(R"({"a": 1, "a": 2})").find("not a JSON Lines record"), std::string::npos);
  EXPECT_EQ(error_of("[1]"), "d.jsonl:7 (byte 99): not a JSON object");
  EXPECT_EQ(error_of(R"({"text": "x"})"),
            "d.jsonl:7 (byte 99): expected {\"messages\": [...]} or {\"prompt\": ..., \"completion\": ...} (TRL's forms)");
  EXPECT_EQ(error_of(R"({"prompt": "x"})"), "d.jsonl:7 (byte 99): a prompt-completion record needs both \"prompt\" and \"completion\"");
  EXPECT_EQ(error_of(R"({"prompt": "x", "completion": 3})"),
            "d.jsonl:7 (byte 99): \"prompt\" and \"completion\" must both be strings or both be lists of messages");
  EXPECT_EQ(error_of(R"({"messages": []})"), "d.jsonl:7 (byte 99): \"messages\" is not a non-empty list of messages");
  EXPECT_EQ(error_of(R"({"messages": [{"content": "x"}]})"), "d.jsonl:7 (byte 99): messages[0] has no string \"role\"");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}]})"),
            "d.jsonl:7 (byte 99): no assistant message: nothing to train on");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})"), "d.jsonl:7 (byte 99): \"tools\" is not a list");
  // The template's own raise_exception, with its line and column.
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]})",
                     "mistral-7b-instruct-v0.3", json{{"bos_token", "<s>"}, {"eos_token", "</s>"}}),
            "d.jsonl:7 (byte 99): mistral-7b-instruct-v0.3.jinja line 18, column 32: After the optional system message, "
            "conversation roles must alternate user/assistant/user/assistant/...");
  // No chat template for a conversation.
  try {
    tokenize_instruction_record(R"({"messages": [{"role": "assistant", "content": "x"}]})", tokenizer("qwen_chat"), nullptr, "f:1");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f:1: a conversation needs a chat template"), std::string::npos);
  }
}

TEST(InstructionData, ATemplateThatBreaksThePrefixRuleIsNamed) {
  ChatFormat format;
  format.chat_template = std::make_shared<ChatTemplate>(
      "{% for m in messages %}{{ m.content }};{% endfor %}{{ messages | length }}", "counting.jinja");
  try {
    tokenize_instruction_record(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})",
                                tokenizer("qwen_chat"), &format, "d.jsonl:2 (byte 5)");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl:2 (byte 5): the chat template breaks the prefix rule at messages[1]"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(InstructionFiles, BadLinesInAFileNameTheFileAndLine) {
  testing::write_text(path("bad.jsonl"), "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": 1, \"completion\": \"b\"}\n");
  try {
    prepare_instruction_data(path("bad.jsonl"), tokenizer("qwen_chat"), nullptr, {path("c"), true});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path("bad.jsonl") + ":2 (byte 35): \"prompt\" and \"completion\" must both"),
              std::string::npos)
        << e.what();
  }
  testing::write_text(path("long.jsonl"), std::string(100, 'x') + "\n");
  EXPECT_THROW(prepare_instruction_data(path("long.jsonl"), tokenizer("qwen_chat"), nullptr, {path("c"), true, 50}), Error);
  testing::write_text(path("empty.jsonl"), "\n\n");
  EXPECT_THROW(prepare_instruction_data(path("empty.jsonl"), tokenizer("qwen_chat"), nullptr, {path("c"), true}), Error);
}

TEST_F(InstructionFiles, DamagedCachesAreRefusedByName) {
  InstructionExample a{{1, 2, 3}, {0, 1, 1}}, b{{4, 5}, {1, 1}};
  write_instruction_file(path("ok.strins"), {a, b}, "tok", 10, 7);
  const std::string good = slurp(path("ok.strins"));
  EXPECT_NO_THROW(check_instruction_file(reinterpret_cast<const unsigned char*>(good.data()), good.size(), "f"));
  auto refused = [&](std::string bytes) {
    try {
      check_instruction_file(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "f");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refused(good.substr(0, good.size() - 1)).find("do not fill"), std::string::npos);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(refused(bad_magic).find("bad magic"), std::string::npos);
  std::string big_id = good;
  big_id[128 + 8 * 3] = 42;  // the first token: id 42 in a vocabulary of 10
  EXPECT_NE(refused(big_id).find("outside the vocabulary"), std::string::npos);
  std::string bad_mask = good;
  bad_mask[bad_mask.size() - 1] = 2;
  EXPECT_NE(refused(bad_mask).find("neither 0 nor 1"), std::string::npos);
  std::string huge_count = good;
  huge_count[16 + 7] = 0x7f;  // example count near 2^63
  EXPECT_NE(refused(huge_count).find("do not fill"), std::string::npos);
  EXPECT_THROW(write_instruction_file(path("x"), {InstructionExample{{11}, {1}}}, "tok", 10, 0), Error);
}

// --- packing ------------------------------------------------------------------------

TEST(InstructionPacking, GreedyRowsOfSeqLenPlusOneWithTruncationCounted) {
  const PackingPlan plan = pack_examples({3, 4, 2, 9, 5, 1}, 5);  // rows of 6 tokens
  ASSERT_EQ(plan.rows.size(), 4u);
  auto examples = [&](size_t r) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const auto& s : plan.rows[r]) out.emplace_back(s.example, s.length);
    return out;
  };
  EXPECT_EQ(examples(0), (std::vector<std::pair<int64_t, int64_t>>{{0, 3}}));          // 3 + 4 > 6
  EXPECT_EQ(examples(1), (std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {2, 2}}));  // 6
  EXPECT_EQ(examples(2), (std::vector<std::pair<int64_t, int64_t>>{{3, 6}}));          // 9 cut to 6
  EXPECT_EQ(examples(3), (std::vector<std::pair<int64_t, int64_t>>{{4, 5}, {5, 1}}));
  EXPECT_EQ(plan.stats.truncated_examples, 1);
  EXPECT_EQ(plan.stats.truncated_tokens, 3);
  EXPECT_EQ(plan.stats.padding_tokens, 3);
  EXPECT_EQ(plan.stats.tokens, 21);
  EXPECT_THROW(pack_examples({1}, 0), Error);
  EXPECT_THROW(pack_examples({0}, 4), Error);
}

class InstructionPackedRows : public testing::TempDirTest {};

TEST_F(InstructionPackedRows, TargetsNeverCrossExamplesAndFollowTheLossMask) {
  // Example 0: tokens 10 11 12 (mask 0 1 1); example 1: 20 21 (mask 0 1); example 2: 30..36 (long).
  write_instruction_file(path("p.strins"),
                         {InstructionExample{{10, 11, 12}, {0, 1, 1}}, InstructionExample{{20, 21}, {0, 1}},
                          InstructionExample{{30, 31, 32, 33, 34, 35, 36}, {1, 1, 1, 1, 1, 1, 1}}},
                         "tok", 100, 0);
  const InstructionFile file(path("p.strins"));
  const PackingPlan plan = pack_examples(file.lengths(), 5);  // rows of 6: [0, 1, pad], [2 cut to 6]
  ASSERT_EQ(plan.rows.size(), 2u);
  const PackedRowData r0 = fill_packed_row(file, plan, 0, 7);
  EXPECT_EQ(r0.tokens, (std::vector<int64_t>{10, 11, 12, 20, 21}));
  EXPECT_EQ(r0.targets, (std::vector<int64_t>{11, 12, -100, 21, -100}));  // 12 -> 20 crosses examples; the row's 6th
                                                                           // token is padding
  EXPECT_EQ(r0.segment_ids, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(r0.position_ids, (std::vector<int64_t>{0, 1, 2, 0, 1}));
  const PackedRowData r1 = fill_packed_row(file, plan, 1);
  EXPECT_EQ(r1.tokens, (std::vector<int64_t>{30, 31, 32, 33, 34}));
  EXPECT_EQ(r1.targets, (std::vector<int64_t>{31, 32, 33, 34, 35}));  // the 7th token (36) was cut
  EXPECT_EQ(r1.position_ids, (std::vector<int64_t>{0, 1, 2, 3, 4}));

  const PackingPlan wide = pack_examples(file.lengths(), 7);  // rows of 8: [0, 1, pad pad pad], [2]
  const PackedRowData w0 = fill_packed_row(file, wide, 0, 7);
  EXPECT_EQ(w0.tokens, (std::vector<int64_t>{10, 11, 12, 20, 21, 7, 7}));
  EXPECT_EQ(w0.targets, (std::vector<int64_t>{11, 12, -100, 21, -100, -100, -100}));
  EXPECT_EQ(w0.segment_ids, (std::vector<int32_t>{0, 0, 0, 1, 1, -1, -1}));
  EXPECT_EQ(w0.position_ids, (std::vector<int64_t>{0, 1, 2, 0, 1, 0, 0}));

  const PackedBatch batch = make_packed_batch(file, wide, {1, 0}, 7);
  EXPECT_EQ(batch.tokens.sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(batch.tokens.scalar_type(), at::kLong);
  EXPECT_EQ(batch.targets.scalar_type(), at::kLong);
  EXPECT_EQ(batch.segment_ids.scalar_type(), at::kInt);
  EXPECT_EQ(batch.position_ids.scalar_type(), at::kLong);
  EXPECT_EQ(batch.tokens[1][3].item<int64_t>(), 20);
  EXPECT_EQ(batch.targets[0][6].item<int64_t>(), -100);  // example 2 is 7 tokens, the row's 8th is padding
  EXPECT_EQ(batch.targets[0][5].item<int64_t>(), 36);
  EXPECT_EQ(batch.segment_ids[1][6].item<int32_t>(), -1);
}

TEST(InstructionPacking, SamplerIsSeededPerRankAndResumesAtAnotherDataParallelSize) {
  const int64_t rows = 11;
  // Two ranks together see each row of an epoch once (one row dropped: 11 % 2).
  PackedRowSampler r0(rows, 0, 2, 5), r1(rows, 1, 2, 5);
  std::vector<int64_t> seen;
  for (int step = 0; step < 5; ++step) {
    for (int64_t x : r0.next(1)) seen.push_back(x);
    for (int64_t x : r1.next(1)) seen.push_back(x);
  }
  std::vector<int64_t> order = r0.epoch_order(0);
  EXPECT_EQ(seen, std::vector<int64_t>(order.begin(), order.begin() + 10));
  EXPECT_EQ(r0.state(), r1.state());
  // The same global stream from the checkpoint at DP 1.
  PackedRowSampler single(rows, 0, 1, 999);
  single.load_state(r0.state());
  // Position 10 of 11: at DP 1 the row DP 2 dropped is still in this epoch, then epoch 1 begins.
  const std::vector<int64_t> epoch1 = r0.epoch_order(1);
  EXPECT_EQ(single.next(3), (std::vector<int64_t>{order[10], epoch1[0], epoch1[1]}));
  EXPECT_NE(PackedRowSampler(rows, 0, 1, 6).epoch_order(0), PackedRowSampler(rows, 0, 1, 5).epoch_order(0));
  EXPECT_THROW(PackedRowSampler(1, 0, 2, 0), Error);
  PackedRowSampler in_order(rows, 0, 1, 0, false);
  EXPECT_EQ(in_order.next(3), (std::vector<int64_t>{0, 1, 2}));
}

TEST_F(InstructionPackedRows, TrainingSourceHoldsOutTheLastRowsAndDealsTheRestToEachRank) {
  // Ten examples of 3 tokens in rows of 4 (seq_len 3): one example a row.
  std::vector<InstructionExample> examples;
  for (int i = 0; i < 10; ++i)
    examples.push_back(InstructionExample{{10 + i, 20 + i, 30 + i}, {0, 1, 1}});
  write_instruction_file(path("ten.strins"), examples, "tok", 100, 0);
  TrainingSourceOptions o;
  o.seq_len = 3;
  o.micro_batch = 2;
  o.eval_batches = 1;
  o.eval_fraction = 0.2;  // the last two rows
  o.dp_size = 2;
  o.seed = 3;
  std::vector<std::unique_ptr<TrainingSource>> ranks;
  for (int r = 0; r < 2; ++r) {
    o.dp_rank = r;
    ranks.push_back(packed_row_source(InstructionFile(path("ten.strins")), o));
  }
  EXPECT_EQ(ranks[0]->train_sequences(), 8);
  EXPECT_EQ(ranks[0]->eval_sequences(), 2);
  EXPECT_EQ(ranks[0]->eval_micro_batches(), 1);
  EXPECT_NE(ranks[0]->details().find("10 examples, 30 tokens packed into 10 rows of 4"), std::string::npos)
      << ranks[0]->details();
  // Each rank's held-out row is one of the last two examples; the ranks' differ.
  const TrainingBatch e0 = ranks[0]->eval_batch(0), e1 = ranks[1]->eval_batch(0);
  ASSERT_EQ(e0.tokens.sizes(), (std::vector<int64_t>{1, 3}));
  std::set<int64_t> held_out = {e0.tokens[0][0].item<int64_t>(), e1.tokens[0][0].item<int64_t>()};
  EXPECT_EQ(held_out, (std::set<int64_t>{18, 19}));
  // An epoch of training rows: every one of the first eight examples once, none held out.
  std::multiset<int64_t> trained;
  for (int step = 0; step < 2; ++step)
    for (auto& rank : ranks) {
      const TrainingBatch b = rank->next();
      ASSERT_EQ(b.segment_ids.sizes(), (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(b.position_ids[0][2].item<int64_t>(), 2);
      EXPECT_EQ(b.targets[0][0].item<int64_t>(), b.tokens[0][1].item<int64_t>());
      for (int64_t i = 0; i < 2; ++i) trained.insert(b.tokens[i][0].item<int64_t>());
    }
  EXPECT_EQ(trained, (std::multiset<int64_t>{10, 11, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(ranks[0]->state(), ranks[1]->state());
  // Too few rows for the ranks: named by file.
  o.dp_size = 16;
  o.dp_rank = 0;
  try {
    packed_row_source(InstructionFile(path("ten.strins")), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ten.strins: its examples pack into 10 rows"), std::string::npos) << e.what();
  }
}

TEST_F(InstructionFiles, AFileInAnotherFormThanDeclaredIsRefusedByLine) {
  const std::string chat = path("chat.jsonl"), text = path("text.jsonl");
  std::ofstream(chat) << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})"
                      << "\n";
  std::ofstream(text) << R"({"prompt": "Hi", "completion": " Hello"})" << "\n";
  const Tokenizer& t = tokenizer("llama3_chat");
  const ChatFormat f = chat_format("llama-3.2-instruct", json{{"bos_token", "<|begin_of_text|>"}});
  InstructionDataOptions o;
  o.cache_dir = path("cache");
  o.form = InstructionForm::prompt_completion;
  try {
    prepare_instruction_data(chat, t, &f, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(chat + ":1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("give it as chat:FILE"), std::string::npos) << e.what();
  }
  o.form = InstructionForm::chat;
  EXPECT_THROW(prepare_instruction_data(text, t, &f, o), Error);
  EXPECT_NO_THROW(prepare_instruction_data(chat, t, &f, o));
  o.form = InstructionForm::prompt_completion;
  EXPECT_NO_THROW(prepare_instruction_data(text, t, nullptr, o));
  // A cache made without the form's check is not taken for one made with it.
  EXPECT_NE(instruction_cache_path(text, t, nullptr, o.cache_dir, InstructionForm::any),
            instruction_cache_path(text, t, nullptr, o.cache_dir, InstructionForm::prompt_completion));
}

}  // namespace
}  // namespace stratum::data
