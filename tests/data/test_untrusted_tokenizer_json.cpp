#include <gtest/gtest.h>
// tokenizer.json / tokenizer_config.json / Stratum merges files from others:
// ids checked before use, every value's type checked by key path, nesting and
// file kinds refused, regular expressions bounded in work, BPE in O(n log n).
// Every refusal names the file and the key or id.
#include <sys/stat.h>

#include <chrono>
#include <climits>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/bounded_regex.h"
#include "stratum/data/bpe_tokenizer.h"
#include "stratum/data/hf_tokenizer.h"
#include "stratum/data/load_tokenizer.h"
#include "temp_dir.h"

namespace stratum::data {
namespace {

using json = nlohmann::json;
const std::string kDir = std::string(STRATUM_TEST_DATA_DIR) + "/tokenizers";
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json fixture(const std::string& name) { return json::parse(slurp(kDir + "/" + name + "/tokenizer.json")); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class UntrustedTokenizerJson : public testing::TempDirTest {
 protected:
  void SetUp() override {
    if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
    TempDirTest::SetUp();
  }
  std::string json_path() const { return path("tokenizer.json"); }
  // The message loading `j` as tokenizer.json gives; checks it names the file and each of `parts`.
  std::string refusal(const json& j, const std::vector<std::string>& parts) {
    testing::write_text(json_path(), j.dump());
    return refusal_of_file(parts);
  }
  std::string refusal_of_file(const std::vector<std::string>& parts) {
    const std::string msg = STRATUM_ERROR_MESSAGE(HfTokenizer::load(json_path()));
    EXPECT_TRUE(contains(msg, json_path())) << msg;
    for (const auto& p : parts) EXPECT_TRUE(contains(msg, p)) << "missing '" << p << "' in: " << msg;
    EXPECT_FALSE(contains(msg, "[json.exception")) << msg;
    return msg;
  }
};

// ---- ids ----------------------------------------------------------------

TEST_F(UntrustedTokenizerJson, NegativeAddedTokenIdIsRefused) {
  auto j = fixture("gpt2");
  j["added_tokens"][0]["id"] = -1;
  refusal(j, {"added_tokens[0].id", "-1"});
  j["added_tokens"][0]["id"] = INT64_MIN;
  refusal(j, {"added_tokens[0].id", std::to_string(INT64_MIN)});
}

TEST_F(UntrustedTokenizerJson, IdsBeyondTheIdSpaceAreRefused) {
  auto j = fixture("gpt2");
  j["added_tokens"][0]["id"] = int64_t{1} << 40;
  refusal(j, {"added_tokens[0].id", std::to_string(int64_t{1} << 40), "outside"});
  j = fixture("gpt2");
  j["model"]["vocab"]["hello"] = 18446744073709551615ull;
  refusal(j, {"model.vocab[\"hello\"]", "too large"});
}

TEST_F(UntrustedTokenizerJson, FloatIdIsRefusedNotTruncated) {
  auto j = fixture("gpt2");
  j["model"]["vocab"]["hello"] = 5.7;
  refusal(j, {"model.vocab[\"hello\"]", "expected an integer", "5.7"});
  j = fixture("gpt2");
  j["added_tokens"][0]["id"] = 3000.0;
  refusal(j, {"added_tokens[0].id", "expected an integer"});
}

TEST_F(UntrustedTokenizerJson, TwoVocabTokensWithOneIdAreRefused) {
  auto j = fixture("gpt2");
  j["model"]["vocab"]["zzzz-new"] = j["model"]["vocab"]["a"];
  refusal(j, {"model.vocab[", "id " + std::to_string(j["model"]["vocab"]["a"].get<int>()), "own id"});
}

TEST_F(UntrustedTokenizerJson, AddedTokenWithAnotherTokensIdIsRefused) {
  auto j = fixture("gpt2");
  const int a = j["model"]["vocab"]["a"].get<int>();
  j["added_tokens"][0]["id"] = a;
  refusal(j, {"added_tokens", "'<|endoftext|>'", "id " + std::to_string(a), "'a'"});
  j = fixture("gpt2");
  j["added_tokens"].push_back(j["added_tokens"][0]);
  j["added_tokens"][1]["content"] = "<|other|>";
  refusal(j, {"added_tokens", "id 3000", "'<|endoftext|>'", "'<|other|>'"});
  j = fixture("gpt2");
  j["added_tokens"].push_back(j["added_tokens"][0]);
  j["added_tokens"][1]["id"] = 3001;
  refusal(j, {"added_tokens[1]", "given twice"});
}

// GPT-2's own file lists <|endoftext|> in the vocabulary and as an added token, with one id.
TEST_F(UntrustedTokenizerJson, AddedTokenRepeatingItsVocabEntryLoads) {
  auto j = fixture("gpt2");
  j["model"]["vocab"]["<|endoftext|>"] = 3000;
  testing::write_text(json_path(), j.dump());
  auto tok = HfTokenizer::load(json_path());
  EXPECT_EQ(tok->vocab_size(), 3001);
  EXPECT_EQ(tok->encode("a<|endoftext|>"), (std::vector<int32_t>{tok->encode("a")[0], 3000}));
  EXPECT_EQ(tok->decode({3000}), "<|endoftext|>");
}

TEST_F(UntrustedTokenizerJson, SparseIdsCannotClaimAHugeTable) {
  auto j = fixture("gpt2");
  j["added_tokens"][0]["id"] = 16'000'000;
  refusal(j, {"added_tokens[0].id", "id 16000000", "unused", "contiguous"});
  // A few unused ids, as some files have, load.
  j["added_tokens"][0]["id"] = 3100;
  testing::write_text(json_path(), j.dump());
  auto tok = HfTokenizer::load(json_path());
  EXPECT_EQ(tok->vocab_size(), 3101);
  EXPECT_EQ(tok->decode({3050}), "\xEF\xBF\xBD");
}

TEST_F(UntrustedTokenizerJson, PostProcessorIdsAreChecked) {
  const auto base = fixture("llama3");
  const std::string key = "post_processor.special_tokens.<|begin_of_text|>.ids[0]";
  for (const json& bad : {json(-1), json(5000), json(2.5), json("x")}) {
    auto j = base;
    j["post_processor"]["special_tokens"]["<|begin_of_text|>"]["ids"][0] = bad;
    refusal(j, {key});
  }
}

// ---- types: every value a file gives is checked where it is read ---------

TEST_F(UntrustedTokenizerJson, WrongTypesAreRefusedByKeyPath) {
  const auto llama3 = fixture("llama3");
  const auto gpt2 = fixture("gpt2");
  struct Case {
    json base;
    std::string pointer;  // JSON pointer to replace
    json value;
    std::string key;  // the key path the message names
  };
  const std::vector<Case> cases = {
      {llama3, "/pre_tokenizer/pretokenizers/0/pattern/Regex", 5, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
      {llama3, "/pre_tokenizer/pretokenizers/0/pattern", "x", "pre_tokenizer.pretokenizers[0].pattern"},
      {llama3, "/pre_tokenizer/pretokenizers", json::object(), "pre_tokenizer.pretokenizers"},
      {llama3, "/pre_tokenizer/pretokenizers/0/behavior", 1, "pre_tokenizer.pretokenizers[0].behavior"},
      {llama3, "/pre_tokenizer/pretokenizers/0/invert", "no", "pre_tokenizer.pretokenizers[0].invert"},
      {llama3, "/model/merges/3", 7, "model.merges[3]"},
      {llama3, "/model/merges/3", json::array({1, "x"}), "model.merges[3][0]"},
      {llama3, "/model/merges", json::object(), "model.merges"},
      {llama3, "/model/vocab", json::array(), "model.vocab"},
      {llama3, "/model", "BPE", "model"},
      {llama3, "/model/type", 5, "model.type"},
      {llama3, "/model/ignore_merges", 1, "model.ignore_merges"},
      {llama3, "/model/byte_fallback", "false", "model.byte_fallback"},
      {llama3, "/added_tokens", json::object(), "added_tokens"},
      {llama3, "/added_tokens/0", 3000, "added_tokens[0]"},
      {llama3, "/added_tokens/0/content", 1, "added_tokens[0].content"},
      {llama3, "/added_tokens/0/lstrip", "no", "added_tokens[0].lstrip"},
      {llama3, "/post_processor/single", 3, "post_processor.single"},
      {llama3, "/post_processor/single/0", "x", "post_processor.single[0]"},
      {llama3, "/post_processor/single/0/SpecialToken/id", 1, "post_processor.single[0].SpecialToken.id"},
      {llama3, "/post_processor/special_tokens/<|begin_of_text|>/ids", "x",
       "post_processor.special_tokens.<|begin_of_text|>.ids"},
      {llama3, "/decoder", 5, "decoder"},
      {gpt2, "/pre_tokenizer/add_prefix_space", "yes", "pre_tokenizer.add_prefix_space"},
      {gpt2, "/pre_tokenizer/use_regex", 0, "pre_tokenizer.use_regex"},
      {gpt2, "/normalizer", "NFC", "normalizer"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key);
    json j = c.base;
    j[json::json_pointer(c.pointer)] = c.value;
    refusal(j, {c.key + ":"});
  }
}

// ---- nesting, file kinds, repeated keys ----------------------------------

json nested_sequence(const char* list_key, json inner, int depth) {
  for (int i = 0; i < depth; ++i) inner = {{"type", "Sequence"}, {list_key, json::array({inner})}};
  return inner;
}

TEST_F(UntrustedTokenizerJson, DeeplyNestedSequencesAreRefused) {
  const auto base = fixture("gpt2");
  // Past the JSON depth cap: refused before any recursion, by line and column.
  for (const char* part : {"pre_tokenizer", "decoder", "normalizer", "post_processor"}) {
    auto j = base;
    j[part] = nested_sequence(std::string(part) == "post_processor" ? "processors" : "pretokenizers",
                              json{{"type", "ByteLevel"}}, 200);
    testing::write_text(json_path(), j.dump());
    const std::string msg = STRATUM_ERROR_MESSAGE(HfTokenizer::load(json_path()));
    EXPECT_TRUE(contains(msg, json_path() + ":")) << msg;
    EXPECT_TRUE(contains(msg, "nest")) << msg;
  }
  // Within it, but deeper than a real file: named by key path.
  auto j = base;
  j["pre_tokenizer"] = nested_sequence("pretokenizers", base["pre_tokenizer"], 20);
  refusal(j, {"pre_tokenizer.pretokenizers[0]", "nest deeper than"});
  j = base;
  j["post_processor"] = nested_sequence("processors", base["post_processor"], 20);
  refusal(j, {"post_processor.processors[0]", "nest deeper than"});
}

TEST_F(UntrustedTokenizerJson, RepeatedVocabKeyIsRefused) {
  testing::write_text(json_path(), R"({"model": {"type": "BPE", "vocab": {"a": 1, "a": 2}, "merges": []}})");
  refusal_of_file({"model.vocab.a", "more than once"});
}

TEST_F(UntrustedTokenizerJson, FifoDeviceAndDirectoryAreRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(json_path().c_str(), 0600), 0);
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(HfTokenizer::load(json_path())), json_path())) << "FIFO";
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(load_tokenizer(json_path())), json_path())) << "FIFO";
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(HfTokenizer::load("/dev/zero")), "/dev/zero"));
  // A model directory whose tokenizer.json is a directory.
  fs::make_directories(path("model/tokenizer.json"));
  const std::string msg = STRATUM_ERROR_MESSAGE(load_tokenizer(path("model")));
  EXPECT_TRUE(contains(msg, path("model/tokenizer.json"))) << msg;
  EXPECT_TRUE(contains(msg, "directory")) << msg;
  // A FIFO tokenizer_config.json beside a good tokenizer.json.
  fs::make_directories(path("cfg"));
  testing::write_text(path("cfg/tokenizer.json"), slurp(kDir + "/gpt2/tokenizer.json"));
  ASSERT_EQ(::mkfifo(path("cfg/tokenizer_config.json").c_str(), 0600), 0);
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(HfTokenizer::load(path("cfg/tokenizer.json"))),
                       path("cfg/tokenizer_config.json")));
}

TEST_F(UntrustedTokenizerJson, TokenizerConfigWrongTypesAreRefusedByName) {
  fs::make_directories(path("m"));
  testing::write_text(path("m/tokenizer.json"), slurp(kDir + "/gpt2/tokenizer.json"));
  const std::string config = path("m/tokenizer_config.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"bos_token": 5})", "bos_token"},
      {R"({"eos_token": ["<|endoftext|>"]})", "eos_token"},
      {R"({"bos_token": {"content": 5}})", "bos_token.content"},
      {R"({"eos_token": {"text": "<|endoftext|>"}})", "eos_token"},
      {R"({"add_bos_token": "yes"})", "add_bos_token"},
      {R"({"bos_token": "<|no-such|>"})", "bos_token"},
      {R"([1, 2])", "expected an object"},
      {R"({"bos_token": "a", "bos_token": "b"})", "bos_token"},
      {"", "empty"},
  };
  for (const auto& [text, key] : cases) {
    testing::write_text(config, text);
    const std::string msg = STRATUM_ERROR_MESSAGE(HfTokenizer::load(path("m/tokenizer.json")));
    EXPECT_TRUE(contains(msg, config)) << msg;
    EXPECT_TRUE(contains(msg, key)) << key << " in: " << msg;
    EXPECT_FALSE(contains(msg, "[json.exception")) << msg;
  }
  testing::write_text(config, R"({"bos_token": {"content": "<|endoftext|>"}, "eos_token": null})");
  auto tok = HfTokenizer::load(path("m/tokenizer.json"));
  EXPECT_EQ(tok->bos_id(), 3000);
  EXPECT_EQ(tok->eos_id(), -1);
}

// ---- regular expressions --------------------------------------------------

json with_split_pattern(const std::string& pattern) {
  auto j = fixture("llama3");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
  return j;
}

const std::string kPatternKey = "pre_tokenizer.pretokenizers[0].pattern.Regex";

TEST_F(UntrustedTokenizerJson, BacktrackingPatternEndsInAnErrorNamingKeyAndByte) {
  testing::write_text(json_path(), with_split_pattern("(a|aa)+b").dump());
  auto tok = HfTokenizer::load(json_path());
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = STRATUM_ERROR_MESSAGE(tok->encode(std::string(100000, 'a')));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  for (const std::string& part : std::vector<std::string>{json_path(), kPatternKey, "at byte", "limit"})
    EXPECT_TRUE(contains(msg, part)) << part << " in: " << msg;
}

TEST_F(UntrustedTokenizerJson, DeeplyNestedPatternIsRefusedAtLoad) {
  refusal(with_split_pattern(std::string(200, '(') + "a" + std::string(200, ')')), {kPatternKey, "does not compile"});
  refusal(with_split_pattern(std::string(100000, 'a')), {kPatternKey, "over the limit"});
}

// A Split's literal String compiles as a literal (PCRE2 refuses it with Unicode properties).
TEST_F(UntrustedTokenizerJson, LiteralSplitStringCutsTheText) {
  auto j = fixture("llama3");
  j["pre_tokenizer"]["pretokenizers"][0] = {
      {"type", "Split"}, {"pattern", {{"String", "\n\n"}}}, {"behavior", "Removed"}, {"invert", false}};
  testing::write_text(json_path(), j.dump());
  auto tok = HfTokenizer::load(json_path());
  auto want = tok->encode("ab(");
  const auto tail = tok->encode("c.");
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(tok->encode("ab(\n\nc."), want);
}

// A pattern reading ahead to the end of the text at every match needs n^2
// work without reaching PCRE2's per-match limits; the budget ends it.
TEST_F(UntrustedTokenizerJson, PatternReadingToTheEndAtEveryMatchExceedsTheBudget) {
  for (const std::string pattern : {"x(?=.*y)", "\\p{L}+q"}) {
    testing::write_text(json_path(), with_split_pattern(pattern).dump());
    auto tok = HfTokenizer::load(json_path());
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msg = STRATUM_ERROR_MESSAGE(tok->encode(std::string(200000, 'x')));
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << pattern;
    for (const std::string& part :
         std::vector<std::string>{json_path(), kPatternKey, "200000 bytes", "reads ahead to the end of the text"})
      EXPECT_TRUE(contains(msg, part)) << part << " in: " << msg;
  }
}

// Long runs of real patterns' classes stay far within the budget.
TEST_F(UntrustedTokenizerJson, RealPatternsOnLongRunsStayWithinTheBudget) {
  for (const std::string name : {"gpt2", "llama3"}) {
    auto tok = HfTokenizer::load(kDir + "/" + name + "/tokenizer.json");
    std::string mixed;
    for (int i = 0; i < 1000; ++i) mixed += std::string(i % 300, " \n7a-"[i % 5]) + "word ";
    for (const std::string& text : {std::string(1 << 20, ' ') + "x", std::string(1 << 20, '7'),
                                    std::string(1 << 20, '-'), std::string(1 << 20, '\n'), mixed}) {
      std::vector<int32_t> ids;
      EXPECT_NO_THROW(ids = tok->encode(text)) << name;
      EXPECT_EQ(tok->decode(ids), text) << name;
    }
  }
}

// Matching window by window gives what one match over the whole text gives,
// at every window size, lookaround and anchors at the window's edges included.
TEST_F(UntrustedTokenizerJson, WindowedMatchingEqualsWholeTextMatching) {
  const std::vector<std::string> patterns = {kGpt2Pattern, kLlama3Pattern, R"(a$|\bb|(?<=c)d|x(?=yy)|\s+\z|(?<!\s)\s)"};
  const std::vector<std::string> alphabet = {" ", "  ", "\n", "\r\n", "a", "b", "c", "d", "x", "y", "1", "\xC3\xA9",
                                             "\xE6\x97\xA5", "'s", ".", "\t"};
  std::mt19937 rng(7);
  int compared = 0;
  for (int round = 0; round < 600; ++round) {
    std::string text;
    const int parts = static_cast<int>(rng() % 120);
    for (int i = 0; i < parts; ++i)
      text += rng() % 8 == 0 ? std::string(rng() % 60, " \n"[rng() % 2]) : alphabet[rng() % alphabet.size()];
    for (const auto& pattern : patterns) {
      const auto whole = split_by_pattern(pattern, text, SIZE_MAX);
      for (size_t window : {1, 2, 3, 7, 16, 64}) {
        ASSERT_EQ(split_by_pattern(pattern, text, window), whole) << "window " << window << " pattern " << pattern
                                                                  << " text '" << text << "'";
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 600 * 3 * 6);
}

// ---- BPE ----------------------------------------------------------------

// The former algorithm: rescan every adjacent pair after each merge, merge
// the lowest rank, the leftmost on a tie. Quadratic; for short words only.
struct QuadraticBpe {
  std::unordered_map<std::string, int32_t> vocab;
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> merges;  // -> (rank, merged)
  std::vector<int32_t> byte_ids;

  explicit QuadraticBpe(const json& j) {
    for (const auto& [token, id] : j["model"]["vocab"].items()) vocab[token] = id.get<int32_t>();
    std::vector<std::string> alphabet(256);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : next++;
      std::string s;
      if (cp < 0x80) s += char(cp);
      else s += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
      byte_ids.push_back(vocab.at(s));
    }
    const auto& list = j["model"]["merges"];
    for (size_t rank = 0; rank < list.size(); ++rank) {
      const std::string l = list[rank][0], r = list[rank][1];
      merges.emplace(std::make_pair(vocab.at(l), vocab.at(r)), std::make_pair(int32_t(rank), vocab.at(l + r)));
    }
  }
  std::vector<int32_t> encode(const std::string& piece) const {
    std::vector<int32_t> symbols;
    for (unsigned char c : piece) symbols.push_back(byte_ids[c]);
    while (symbols.size() > 1) {
      int32_t best_rank = INT32_MAX, best_id = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = merges.find({symbols[i], symbols[i + 1]});
        if (it != merges.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best_id = it->second.second;
          best = i;
        }
      }
      if (best_id < 0) break;
      symbols[best] = best_id;
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    return symbols;
  }
};

TEST_F(UntrustedTokenizerJson, PriorityQueueBpeEqualsTheQuadraticMerge) {
  const json j = fixture("llama3");  // ignore_merges off below: every word goes through the merges
  auto changed = j;
  changed["model"]["ignore_merges"] = false;
  testing::write_text(json_path(), changed.dump());
  auto tok = HfTokenizer::load(json_path());
  const QuadraticBpe reference(j);
  std::mt19937 rng(3);
  const std::string letters = "eeeeaaatttnnsshrlx";  // frequent letters: many merges apply
  for (int round = 0; round < 3000; ++round) {
    std::string word;
    const size_t length = 1 + rng() % 40;
    for (size_t i = 0; i < length; ++i) word += letters[rng() % letters.size()];
    if (round % 3 == 0) word = std::string(1 + rng() % 40, letters[rng() % letters.size()]);  // runs of one letter
    ASSERT_EQ(tok->encode(word), reference.encode(word)) << word;
  }
}

TEST_F(UntrustedTokenizerJson, OneMegabyteWordEncodesInUnderASecond) {
  auto tok = HfTokenizer::load(kDir + "/gpt2/tokenizer.json");
  std::mt19937 rng(5);
  const std::string base64_letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string random_word;
  for (int i = 0; i < (1 << 20); ++i) random_word += base64_letters[rng() % base64_letters.size()];
  for (const std::string& word : {random_word, std::string(1 << 20, 'a')}) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(word);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ bpe ] 1 MB word -> %zu ids in %.3f s\n", ids.size(), seconds);
    EXPECT_EQ(tok->decode(ids), word);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
    EXPECT_LT(seconds, 1.0);
#endif
  }
}

// ---- Stratum's own merges file ---------------------------------------------

TEST_F(UntrustedTokenizerJson, MergesFileFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("merges.txt").c_str(), 0600), 0);
  const std::string msg = STRATUM_ERROR_MESSAGE(BpeTokenizer::load(path("merges.txt")));
  EXPECT_TRUE(contains(msg, path("merges.txt"))) << msg;
  EXPECT_TRUE(contains(msg, "regular file")) << msg;
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(load_tokenizer(path("merges.txt"))), path("merges.txt")));
}

TEST_F(UntrustedTokenizerJson, MergesDoublingATokenAreRefused) {
  std::string text = "stratum-bpe 1 296\n97 97\n";
  for (int id = 256; id < 295; ++id) text += std::to_string(id) + " " + std::to_string(id) + "\n";
  testing::write_text(path("merges.txt"), text);
  const std::string msg = STRATUM_ERROR_MESSAGE(BpeTokenizer::load(path("merges.txt")));
  EXPECT_TRUE(contains(msg, path("merges.txt") + ":8:")) << msg;
  EXPECT_TRUE(contains(msg, "128 bytes")) << msg;
}

// ---- loading from text -----------------------------------------------------

TEST_F(UntrustedTokenizerJson, LoadFromTextEqualsLoadFromFiles) {
  const std::string text = slurp(kDir + "/llama3/tokenizer.json");
  const std::string config = slurp(kDir + "/llama3/tokenizer_config.json");
  auto from_text = HfTokenizer::load_from_text(text, "mem/tokenizer.json", config, "mem/tokenizer_config.json");
  auto from_file = HfTokenizer::load(kDir + "/llama3/tokenizer.json");
  EXPECT_EQ(from_text->bos_id(), from_file->bos_id());
  EXPECT_EQ(from_text->eos_id(), from_file->eos_id());
  EXPECT_EQ(from_text->name(), from_file->name());
  EXPECT_EQ(from_text->encode_with_special_tokens("Hello world"), from_file->encode_with_special_tokens("Hello world"));
  const std::string msg = STRATUM_ERROR_MESSAGE(HfTokenizer::load_from_text("{", "mem/tokenizer.json"));
  EXPECT_TRUE(contains(msg, "mem/tokenizer.json")) << msg;
}

}  // namespace
}  // namespace stratum::data
