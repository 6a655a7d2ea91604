// Tokenizers from other projects' files against the Python packages' own ids
// (tests/data/tokenizers, made by make_fixtures.py with `tokenizers` and
// `sentencepiece`): every document of a varied text, the whole text, and the
// special tokens each adds.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/dataset.h"
#include "stratum/data/hf_tokenizer.h"
#include "stratum/data/load_tokenizer.h"
#include "stratum/data/sentencepiece_tokenizer.h"
#include "temp_dir.h"

namespace stratum::data {
namespace {

const std::string kDir = std::string(STRATUM_TEST_DATA_DIR) + "/tokenizers";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> documents() {
  const std::string text = slurp(kDir + "/text.txt");
  std::vector<std::string> docs;
  size_t at = 0;
  for (size_t cut; (cut = text.find("\n\f\n", at)) != std::string::npos; at = cut + 3) docs.push_back(text.substr(at, cut - at));
  docs.push_back(text.substr(at));
  return docs;
}

// expected.bin: per document, the whole text, then the first 64 documents
// with special tokens; each a uint32 count and that many int32 ids.
std::vector<std::vector<int32_t>> expected(const std::string& name) {
  const std::string bytes = slurp(kDir + "/" + name + "/expected.bin");
  std::vector<std::vector<int32_t>> out;
  for (size_t at = 0; at + 4 <= bytes.size();) {
    uint32_t n;
    std::memcpy(&n, bytes.data() + at, 4);
    at += 4;
    std::vector<int32_t> ids(n);
    std::memcpy(ids.data(), bytes.data() + at, 4 * size_t(n));
    at += 4 * size_t(n);
    out.push_back(std::move(ids));
  }
  return out;
}

bool have_files() {
  return std::ifstream(kDir + "/text.txt").good();
}

// round_trip_unless: text whose documents need not round-trip ("" for none).
void expect_agreement(const Tokenizer& tok, const std::string& name, const std::string& round_trip_unless) {
  const auto docs = documents();
  const auto want = expected(name);
  ASSERT_EQ(want.size(), docs.size() + 1 + std::min<size_t>(64, docs.size())) << name << "/expected.bin";
  size_t agree = 0, ids = 0, round_trips = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto got = tok.encode(docs[i]);
    ids += got.size();
    if (got == want[i]) ++agree;
    else ADD_FAILURE() << name << ": document " << i << " differs (" << got.size() << " ids, Python " << want[i].size()
                       << "): " << docs[i].substr(0, 80);
    if (tok.decode(got) == docs[i]) ++round_trips;
    else if (round_trip_unless.empty() || docs[i].find(round_trip_unless) == std::string::npos) ADD_FAILURE() << name << ": decode(encode(document " << i << ")) differs";
  }
  std::string whole;
  for (size_t i = 0; i < docs.size(); ++i) whole += (i ? "\n\f\n" : "") + docs[i];
  const auto t0 = std::chrono::steady_clock::now();
  const auto all = tok.encode(whole);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(all, want[docs.size()]) << name << ": the whole text";
  size_t special_agree = 0;
  for (size_t i = 0; i < std::min<size_t>(64, docs.size()); ++i)
    if (tok.encode_with_special_tokens(docs[i]) == want[docs.size() + 1 + i]) ++special_agree;
  EXPECT_EQ(special_agree, std::min<size_t>(64, docs.size())) << name << ": with special tokens";
  std::printf("[ %s ] %zu/%zu documents agree with Python (%zu ids), %zu round-trip, special tokens %zu/64; whole "
              "text %zu bytes -> %zu ids in %.3f s (%.0f tokens/s, one thread)\n",
              name.c_str(), agree, docs.size(), ids, round_trips, special_agree, whole.size(), all.size(), seconds,
              all.size() / seconds);
}

TEST(TokenizerFiles, Gpt2TokenizerJsonMatchesHuggingFaceTokenizers) {
  if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
  auto tok = load_tokenizer(kDir + "/gpt2");
  EXPECT_EQ(tok->vocab_size(), 3001);
  EXPECT_EQ(tok->eos_id(), 3000);
  EXPECT_EQ(tok->bos_id(), 3000);
  expect_agreement(*tok, "gpt2", "");
  EXPECT_EQ(tok->encode("a<|endoftext|>b"), (std::vector<int32_t>{tok->encode("a")[0], 3000, tok->encode("b")[0]}));
}

TEST(TokenizerFiles, Llama3TokenizerJsonMatchesHuggingFaceTokenizers) {
  if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
  auto tok = load_tokenizer(kDir + "/llama3/tokenizer.json");
  EXPECT_EQ(tok->bos_id(), 3000);
  EXPECT_EQ(tok->eos_id(), 3001);
  expect_agreement(*tok, "llama3", "");
  // A training document: the template's BOS, the text, the EOS.
  const auto doc = encode_document(*tok, "Hello world");
  EXPECT_EQ(doc.front(), 3000);
  EXPECT_EQ(doc.back(), 3001);
  EXPECT_EQ(doc.size(), tok->encode("Hello world").size() + 2);
}

TEST(TokenizerFiles, Llama2SentencePieceModelMatchesSentencePiece) {
  if (!sentencepiece_available()) GTEST_SKIP() << "this build has no libsentencepiece";
  auto tok = load_tokenizer(kDir + "/llama2");
  EXPECT_EQ(tok->vocab_size(), 3000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  // SentencePiece decodes its own space mark U+2581 as a space, in Python too.
  expect_agreement(*tok, "llama2", "\xE2\x96\x81");
}

class TokenizerFileErrors : public testing::TempDirTest {};

TEST_F(TokenizerFileErrors, OlderMergesFormatLoadsAlike) {
  if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
  auto root = nlohmann::json::parse(slurp(kDir + "/llama3/tokenizer.json"));
  for (auto& m : root["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  testing::write_text(path("tokenizer.json"), root.dump());
  auto older = HfTokenizer::load(path("tokenizer.json"));
  auto newer = HfTokenizer::load(kDir + "/llama3/tokenizer.json");
  for (const auto& d : documents()) ASSERT_EQ(older->encode(d), newer->encode(d));
}

TEST_F(TokenizerFileErrors, UnsupportedPartsAreNamed) {
  if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
  const auto root = nlohmann::json::parse(slurp(kDir + "/gpt2/tokenizer.json"));
  auto expect_error = [&](nlohmann::json j, const std::string& what) {
    testing::write_text(path("tokenizer.json"), j.dump());
    try {
      HfTokenizer::load(path("tokenizer.json"));
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path("tokenizer.json")), std::string::npos) << e.what();
    }
  };
  auto j = root;
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(j, "normalizer 'NFKC'");
  j = root;
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model.type 'WordPiece'");
  j = root;
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(j, "pre_tokenizer.type 'Metaspace'");
  j = root;
  j["model"]["merges"][5] = {"no-such-token", "x"};
  expect_error(j, "model.merges[5]");
  j = root;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(j, "does not compile at offset");
  j = root;
  j["added_tokens"][0]["lstrip"] = true;
  expect_error(j, "lstrip");
  testing::write_text(path("tokenizer.json"), "{ not json");
  EXPECT_THROW(HfTokenizer::load(path("tokenizer.json")), Error);
  if (!sentencepiece_available()) return;
  testing::write_text(path("tokenizer.model"), "not a model");
  try {
    load_tokenizer(path("tokenizer.model"));
    ADD_FAILURE() << "no error for a bad tokenizer.model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path("tokenizer.model")), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_tokenizer(path("missing")), Error);
}

// Text files and JSON Lines as documents: the tokenizer's BOS before each,
// its EOS after; tokenized in parallel pieces, the ids equal one encode() of
// each document.
TEST_F(TokenizerFileErrors, DocumentsOfTextFilesAndJsonLinesCarryBosAndEos) {
  if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
  auto tok = load_tokenizer(kDir + "/llama3");
  const auto docs = documents();
  fs::make_directories(path("texts"));
  std::string jsonl;
  std::vector<int32_t> want;
  for (size_t i = 0; i < 40; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "texts/%03zu.txt", i);
    testing::write_text(path(name), docs[i]);
    const auto ids = encode_document(*tok, docs[i]);
    want.insert(want.end(), ids.begin(), ids.end());
    jsonl += nlohmann::json{{"text", docs[i]}}.dump() + "\n\n";
  }
  testing::write_text(path("docs.jsonl"), jsonl);
  for (const std::string source : {path("texts"), path("docs.jsonl")}) {
    TokenFile file = prepare_dataset(source, *tok, {path("cache"), true});
    ASSERT_EQ(file.size(), static_cast<int64_t>(want.size())) << source;
    std::vector<int64_t> got(want.size());
    file.read(0, file.size(), got.data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << source;
  }
  testing::write_text(path("bad.jsonl"), "{\"text\": \"fine\"}\n{\"txt\": 1}\n");
  try {
    prepare_dataset(path("bad.jsonl"), *tok, {path("cache"), true});
    ADD_FAILURE() << "a line without \"text\" was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path("bad.jsonl") + ":2 (byte 17)"), std::string::npos) << e.what();
  }
  testing::write_text(path("cut.jsonl"), "{\"text\": \"fine\"}\n{\"text\": \"trunc");
  EXPECT_THROW(prepare_dataset(path("cut.jsonl"), *tok, {path("cache"), true}), Error);
  ByteTokenizer bytes;
  try {
    prepare_dataset(path("docs.jsonl"), bytes, {path("cache"), true});
    ADD_FAILURE() << "JSON Lines without an EOS were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("end-of-text token"), std::string::npos) << e.what();
  }
}

TEST(TokenizerFiles, InvalidUtf8IsReplacedAsPythonWould) {
  if (!hf_tokenizer_available()) GTEST_SKIP() << "this build has no PCRE2";
  auto tok = load_tokenizer(kDir + "/gpt2");
  EXPECT_EQ(tok->encode("ab\xff" "cd"), tok->encode("ab\xEF\xBF\xBD" "cd"));
}

}  // namespace
}  // namespace stratum::data
