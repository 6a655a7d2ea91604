// Byte-level BPE: chunking, training (exact merges on a small text, the
// default corpus), exact round trips, the merges file and its errors.
#include <gtest/gtest.h>

#include <chrono>

#include "stratum/core/error.h"
#include "stratum/data/bpe_tokenizer.h"
#include "stratum/data/dataset.h"
#include "stratum/data/default_corpus.h"
#include "temp_dir.h"

using namespace stratum;
using namespace stratum::data;
using data::testing::write_text;

namespace {
class BpeTest : public data::testing::TempDirTest {};

// Trained once for the tests that need a real vocabulary.
const BpeTokenizer& corpus_bpe() {
  static const BpeTokenizer tok = [] {
    const auto t0 = std::chrono::steady_clock::now();
    BpeTokenizer t = BpeTokenizer::train(default_corpus_text(), 512);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("BPE 512 trained on the default corpus in %.2f s\n", s);
    return t;
  }();
  return tok;
}
}  // namespace

TEST(BpeChunks, WordsTakeOneLeadingSpace) {
  const auto chunks = bpe_chunks("The cat, 42 dogs!\n\n  end caf\xC3\xA9");
  const std::vector<std::string_view> expected = {"The", " cat", ",", " 42", " dogs", "!", "\n\n ", " end",
                                                  " caf\xC3\xA9"};
  EXPECT_EQ(chunks, expected);
  const std::string long_run = std::string(200, 'a') + "   ";
  std::string joined;
  for (auto c : bpe_chunks(long_run)) {
    EXPECT_LE(c.size(), 64u);
    joined += c;
  }
  EXPECT_EQ(joined, long_run);
}

TEST(Bpe, LearnsTheMostFrequentPairFirst) {
  const auto tok = BpeTokenizer::train("ab ab ab", 300);
  // (a, b) occurs 3 times; then (' ', ab) twice; then no pair occurs twice.
  const std::vector<std::pair<int32_t, int32_t>> expected = {{'a', 'b'}, {' ', 256}};
  EXPECT_EQ(tok.merges(), expected);
  EXPECT_EQ(tok.vocab_size(), 258);
  EXPECT_EQ(tok.encode("ab ab"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_EQ(tok.decode({257, 256, 'x'}), " ababx");
}

TEST(Bpe, CorpusRoundTripAndCompression) {
  const auto& tok = corpus_bpe();
  EXPECT_EQ(tok.vocab_size(), 512);
  const std::string text = default_corpus_text();
  const auto ids = tok.encode(text);
  std::printf("default corpus: %zu bytes -> %zu BPE-512 tokens (%.2f bytes per token)\n", text.size(), ids.size(),
              double(text.size()) / ids.size());
  EXPECT_LT(ids.size(), text.size() / 2);
  for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 512);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.encode(" the").size(), 1u);  // the commonest word is one token
}

TEST(Bpe, RoundTripsAnyBytes) {
  const auto& tok = corpus_bpe();
  std::string binary;
  for (int b = 0; b < 256; ++b) binary.push_back(static_cast<char>(b));
  for (const std::string& s : {std::string("Hello, world! The License, version 2.0.\n"),
                               std::string("na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), binary + binary,
                               std::string(), std::string(1000, ' ')})
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  EXPECT_EQ(tok.decode({'a', 512, -3}), "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Bpe, TrainingIsDeterministicAndNamedByItsMerges) {
  const std::string text = default_corpus_text().substr(0, 30000);
  const auto a = BpeTokenizer::train(text, 300), b = BpeTokenizer::train(text, 300);
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(a.name(), b.name());
  EXPECT_EQ(a.name().rfind("bpe300-", 0), 0u) << a.name();
  EXPECT_LE(a.name().size(), 31u);
  const auto c = BpeTokenizer::train(default_corpus_text().substr(30000, 30000), 300);
  EXPECT_NE(a.name(), c.name());
}

TEST_F(BpeTest, SaveLoadAndTokenizeADataset) {
  const auto& tok = corpus_bpe();
  tok.save(path("merges.txt"));
  const auto loaded = BpeTokenizer::load(path("merges.txt"));
  EXPECT_EQ(loaded.merges(), tok.merges());
  EXPECT_EQ(loaded.name(), tok.name());
  auto via_spec = load_tokenizer(path("merges.txt"));
  EXPECT_EQ(via_spec->name(), tok.name());
  EXPECT_EQ(load_tokenizer("byte")->name(), "byte");

  write_text(path("corpus.txt"), "The license, the license, the license.\n");
  const TokenFile f = prepare_dataset(path("corpus.txt"), loaded);
  EXPECT_EQ(f.path(), path("corpus.txt." + tok.name() + ".strtok"));
  EXPECT_EQ(f.tokenizer_name(), tok.name());
  EXPECT_EQ(f.vocab_size(), 512);
  std::vector<int64_t> ids64(f.size());
  f.read(0, f.size(), ids64.data());
  EXPECT_EQ(loaded.decode(std::vector<int32_t>(ids64.begin(), ids64.end())), "The license, the license, the license.\n");
}

TEST_F(BpeTest, MergesFileErrorsNameFileAndLine) {
  write_text(path("bad1.txt"), "hello\n");
  auto msg = STRATUM_ERROR_MESSAGE(BpeTokenizer::load(path("bad1.txt")));
  EXPECT_NE(msg.find(path("bad1.txt") + ":1: not a Stratum BPE merges file"), std::string::npos) << msg;
  write_text(path("bad2.txt"), "stratum-bpe 1 258\n97 98\n97 300\n");
  msg = STRATUM_ERROR_MESSAGE(BpeTokenizer::load(path("bad2.txt")));
  EXPECT_NE(msg.find(path("bad2.txt") + ":3: expected two ids below 257, got \"97 300\""), std::string::npos) << msg;
  write_text(path("bad3.txt"), "stratum-bpe 1 260\n97 98\n");
  msg = STRATUM_ERROR_MESSAGE(BpeTokenizer::load(path("bad3.txt")));
  EXPECT_NE(msg.find("header says vocabulary size 260 but the file holds 1 merges"), std::string::npos) << msg;
  msg = STRATUM_ERROR_MESSAGE(BpeTokenizer::load(path("none.txt")));
  EXPECT_NE(msg.find(path("none.txt") + ": cannot read BPE merges"), std::string::npos) << msg;
  EXPECT_THROW(BpeTokenizer::train("abc", 100), Error);
}
