// tokenizer.model files from a download: the ModelProto checked before
// libsentencepiece sees it (its normalizer's precompiled_charsmap trie is
// walked unchecked by the library), the file read as a regular file only, the
// tokenizer_config.json beside it type-checked, and a 1 MB word timed.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/data/sentencepiece_model_check.h"
#include "stratum/data/sentencepiece_tokenizer.h"
#include "temp_dir.h"

namespace stratum::data {
namespace {

using testing::read_text;
using testing::TempDirTest;
using testing::write_text;

const std::string kLlama2 = std::string(STRATUM_TEST_DATA_DIR) + "/tokenizers/llama2/tokenizer.model";
// A unigram model trained with normalization_rule_name=nmt_nfkc: a real 240 KB charsmap.
const std::string kNfkcSeed =
    std::string(STRATUM_TEST_DATA_DIR) + "/tokenizers/spm_nfkc/unigram_nfkc.model";

// ---- A little protobuf writer for crafted models ---------------------------

std::string varint(uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string varint_field(int number, int64_t v) { return varint(uint64_t(number) << 3) + varint(uint64_t(v)); }
std::string bytes_field(int number, const std::string& s) {
  return varint(uint64_t(number) << 3 | 2) + varint(s.size()) + s;
}
std::string float_field(int number, float f) {
  std::string out = varint(uint64_t(number) << 3 | 5);
  char b[4];
  std::memcpy(b, &f, 4);  // the tests run on little-endian hosts, as the library's format assumes
  return out + std::string(b, 4);
}
std::string piece(const std::string& text, float score, int type = 1) {
  return bytes_field(1, bytes_field(1, text) + float_field(2, score) + varint_field(3, type));
}

// <unk> <s> </s> and a few normal pieces, enough to encode "a", "b", "A".
std::string default_pieces() {
  return piece("<unk>", 0, 2) + piece("<s>", 0, 3) + piece("</s>", 0, 3) + piece("\xE2\x96\x81", -1) +
         piece("a", -2) + piece("b", -2) + piece("A", -2) + piece("\xE2\x96\x81" "a", -1.5f);
}

std::string trainer(int model_type = 1, int unk = 0, int bos = 1, int eos = 2, int pad = -1) {
  return varint_field(3, model_type) + varint_field(40, unk) + varint_field(41, bos) + varint_field(42, eos) +
         varint_field(43, pad);
}

std::string model(const std::string& pieces, const std::string& trainer_fields, const std::string& charsmap = "",
                  const std::string& extra = "") {
  std::string normalizer = bytes_field(1, "custom");
  if (!charsmap.empty()) normalizer += bytes_field(2, charsmap);
  return pieces + bytes_field(2, trainer_fields) + bytes_field(3, normalizer) + extra;
}

// A Darts-clone double array built by hand, in the layout libsentencepiece
// reads (third_party/darts_clone/darts.h): a unit's children at
// (pos ^ offset) ^ byte, its leaf (a value unit) at pos ^ offset.
struct Trie {
  std::vector<uint32_t> units = std::vector<uint32_t>(512, 0);
  std::string normalized;

  void node(size_t pos, uint8_t label, uint32_t base, bool leaf) {
    const uint32_t offset = static_cast<uint32_t>(pos) ^ base;
    units[pos] = label | (leaf ? 1u << 8 : 0) | (offset < (1u << 21) ? offset << 10 : (offset << 2) | (1u << 9));
  }
  void value(size_t pos, uint32_t v) { units[pos] = v | (1u << 31); }

  std::string blob(uint32_t trie_bytes) const {
    std::string out(4, '\0');
    std::memcpy(out.data(), &trie_bytes, 4);
    out.append(reinterpret_cast<const char*>(units.data()), units.size() * 4);
    return out + normalized;
  }
  std::string blob() const { return blob(static_cast<uint32_t>(units.size() * 4)); }
};

// "A" -> "a": the root's children in units 256..511, 'A' at 256 ^ 0x41 = 321
// with a leaf at 321 ^ 0x100 = 65, the value 0: "a" at byte 0.
Trie upper_a_to_lower() {
  Trie t;
  t.node(0, 0, 256, false);
  t.node(256 ^ 'A', 'A', 0x41, true);
  t.value(0x41, 0);
  t.normalized = std::string("a\0", 2);
  return t;
}

// Whether `message` contains `part`, showing the message when not.
::testing::AssertionResult contains(const std::string& message, const std::string& part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << message << "\"\ndoes not contain \"" << part << "\"";
}

std::string refusal(const std::string& bytes) {
  return STRATUM_ERROR_MESSAGE(check_sentencepiece_model(bytes, "tokenizer.model"));
}

std::string charsmap_refusal(const std::string& charsmap) {
  return refusal(model(default_pieces(), trainer(), charsmap));
}
std::string pieces_refusal(const std::string& extra_piece) {
  return refusal(model(default_pieces() + extra_piece, trainer()));
}
std::string trainer_refusal(int model_type, int unk = 0, int bos = 1, int eos = 2) {
  return refusal(model(default_pieces(), trainer(model_type, unk, bos, eos)));
}

// The first length-delimited field `number` of a message: its offset and size.
std::pair<size_t, size_t> find_field(const std::string& bytes, size_t begin, size_t end, uint32_t number) {
  size_t pos = begin;
  auto read_varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<unsigned char>(bytes.at(pos++));
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (pos < end) {
    const uint64_t key = read_varint();
    switch (key & 7) {
      case 0: read_varint(); break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2: {
        const size_t length = read_varint();
        if ((key >> 3) == number) return {pos, length};
        pos += length;
        break;
      }
    }
  }
  return {std::string::npos, 0};
}

class SentencePieceFiles : public TempDirTest {
 protected:
  void SetUp() override {
    if (!sentencepiece_available()) GTEST_SKIP() << "this build has no libsentencepiece";
    TempDirTest::SetUp();
  }
};

// ---- What must keep working ------------------------------------------------

TEST_F(SentencePieceFiles, Llama2FixtureIsAcceptedAndTokenizesAsBefore) {
  const SentencePieceModelFacts facts = check_sentencepiece_model(read_text(kLlama2), kLlama2);
  EXPECT_EQ(facts.pieces, 3000);
  EXPECT_EQ(facts.model_type, 2);  // BPE
  auto tok = SentencePieceTokenizer::load(kLlama2);
  EXPECT_EQ(tok->vocab_size(), 3000);
  EXPECT_EQ(tok->decode(tok->encode("Hello world")), "Hello world");
  auto from_bytes = SentencePieceTokenizer::load_from_bytes(read_text(kLlama2), kLlama2);
  EXPECT_EQ(from_bytes->encode("Hello world"), tok->encode("Hello world"));
  EXPECT_EQ(from_bytes->name(), tok->name());
}

TEST_F(SentencePieceFiles, RealNfkcCharsmapIsAcceptedAndNormalizes) {
  const std::string bytes = read_text(kNfkcSeed);
  ASSERT_FALSE(bytes.empty()) << kNfkcSeed;
  EXPECT_GT(check_sentencepiece_model(bytes, kNfkcSeed).normalizer_charsmap_bytes, 200000u);
  auto tok = SentencePieceTokenizer::load_from_bytes(bytes, kNfkcSeed);
  // Full-width letters fold to ASCII under NFKC.
  EXPECT_EQ(tok->encode("\xEF\xBD\x86\xEF\xBD\x95\xEF\xBD\x8C\xEF\xBD\x8C"), tok->encode("full"));
}

TEST_F(SentencePieceFiles, HandBuiltCharsmapIsReadAsTheLibraryReadsIt) {
  auto tok = SentencePieceTokenizer::load_from_bytes(model(default_pieces(), trainer(), upper_a_to_lower().blob()),
                                                     "tokenizer.model");
  EXPECT_EQ(tok->encode("A"), tok->encode("a"));
  EXPECT_NE(tok->encode("b"), tok->encode("a"));
}

// ---- The crash: a damaged charsmap trie -------------------------------------

// libsentencepiece 0.1.97 loads this and then reads 1 GB past the trie on the
// first encode (a segmentation fault): the root unit's offset was set to 2^28.
TEST_F(SentencePieceFiles, CharsmapWhoseRootPointsBeyondTheTrieIsRefusedByName) {
  std::string bytes = read_text(kNfkcSeed);
  const auto [normalizer, normalizer_size] = find_field(bytes, 0, bytes.size(), 3);
  ASSERT_NE(normalizer, std::string::npos);
  const auto [charsmap, charsmap_size] = find_field(bytes, normalizer, normalizer + normalizer_size, 2);
  ASSERT_NE(charsmap, std::string::npos);
  uint32_t root;
  std::memcpy(&root, bytes.data() + charsmap + 4, 4);
  root = (root & ((1u << 31) | (1u << 8) | 0xFF)) | ((1u << 20) << 10) | (1u << 9);  // offset (2^20) << 8
  std::memcpy(bytes.data() + charsmap + 4, &root, 4);
  const std::string model_path = path("tokenizer.model");
  write_text(model_path, bytes);
  EXPECT_EQ(STRATUM_ERROR_MESSAGE(SentencePieceTokenizer::load(model_path)),
            model_path + ": normalizer_spec.precompiled_charsmap: trie unit 0 points to unit 268435711, beyond the "
                         "trie's 44800 units; the file is damaged or not a SentencePiece model; download it again");
}

TEST_F(SentencePieceFiles, CharsmapUnitPointingBeyondTheTrieIsRefused) {
  Trie t = upper_a_to_lower();
  t.node(256 ^ 'A', 'A', 0x541, true);
  EXPECT_TRUE(contains(charsmap_refusal(t.blob()),
                       "normalizer_spec.precompiled_charsmap: trie unit 321 points to unit 1535, beyond the "
                       "trie's 512 units"));
}

TEST_F(SentencePieceFiles, CharsmapTrieSizeIsChecked) {
  const Trie t = upper_a_to_lower();
  EXPECT_TRUE(contains(charsmap_refusal(t.blob(2046)), "trie size 2046 is not a positive multiple of 4"));
  // 0.1.97 accepts a size up to 3 bytes past the blob (it compares with the
  // size field included): 2052 of a 2054-byte blob whose trie has 2050.
  const uint32_t past = static_cast<uint32_t>(t.blob().size()) - 2;
  EXPECT_TRUE(contains(charsmap_refusal(t.blob(past)), "is beyond the charsmap's"));
  EXPECT_TRUE(contains(charsmap_refusal(std::string("\x04\0\0", 3)), "3 bytes cannot hold a trie size and trie"));
}

TEST_F(SentencePieceFiles, CharsmapLeafOutsideTheNormalizedStringsIsRefused) {
  Trie t = upper_a_to_lower();
  t.value(0x41, 100);
  EXPECT_TRUE(contains(charsmap_refusal(t.blob()),
                       "trie unit 321's leaf (unit 65) points to byte 100 of the normalized strings, beyond "
                       "their 2 bytes"));
  t = upper_a_to_lower();
  t.normalized = "a";  // no NUL: the library's strlen would run on
  EXPECT_TRUE(contains(charsmap_refusal(t.blob()), "has no terminating NUL"));
}

TEST_F(SentencePieceFiles, CharsmapCycleThroughALeafIsRefused) {
  Trie t = upper_a_to_lower();
  t.node(256 ^ 'A', 'A', 256, true);  // 'A' again leads back to unit 321; its leaf at unit 256
  t.value(256, 0);
  EXPECT_TRUE(contains(charsmap_refusal(t.blob()), "trie unit 321 has a leaf and lies on a cycle of trie units"));
}

// A chain of `leaves` nodes on 'A', each with a leaf: "AAA..." matches at
// every length. The library keeps 32 matches per position in a stack array.
Trie chain_of_leaves(int leaves) {
  Trie t;
  t.units.assign(256 * (leaves + 2), 0);
  t.node(0, 0, 256, false);
  for (int k = 1; k <= leaves; ++k) {
    const uint32_t base = 256 * (k + 1);
    t.node(256 * k + 'A', 'A', base, true);
    t.value(base, 0);
  }
  t.normalized = std::string("a\0", 2);
  return t;
}

TEST_F(SentencePieceFiles, CharsmapPathWithMoreLeavesThanTheLibraryKeepsIsRefused) {
  EXPECT_TRUE(contains(charsmap_refusal(chain_of_leaves(33).blob()), "a path through the trie passes 33 leaves"));
  auto tok = SentencePieceTokenizer::load_from_bytes(model(default_pieces(), trainer(), chain_of_leaves(32).blob()),
                                                     "tokenizer.model");
  EXPECT_FALSE(tok->encode(std::string(40, 'A')).empty());
}

TEST_F(SentencePieceFiles, DenormalizerCharsmapIsCheckedToo) {
  Trie t = upper_a_to_lower();
  t.node(256 ^ 'A', 'A', 0x541, true);
  const std::string denormalizer = bytes_field(5, bytes_field(2, t.blob()));
  EXPECT_TRUE(contains(refusal(model(default_pieces(), trainer(), "", denormalizer)),
                       "denormalizer_spec.precompiled_charsmap: trie unit 321"));
}

// ---- Pieces, trainer_spec and the wire format -------------------------------

TEST_F(SentencePieceFiles, PiecesAreChecked) {
  EXPECT_TRUE(contains(refusal(model("", trainer())), "tokenizer.model: pieces: the model has no pieces"));
  EXPECT_TRUE(contains(pieces_refusal(piece("", 0)), "pieces[8].piece: is empty"));
  EXPECT_TRUE(contains(pieces_refusal(piece("a", 0)), "pieces[8].piece: \"a\" is given twice"));
  EXPECT_TRUE(contains(pieces_refusal(piece(std::string("x\0y", 3), 0)),
                       "pieces[8].piece: \"x\\x00y\" contains a NUL byte"));
  EXPECT_TRUE(contains(pieces_refusal(piece("c", std::numeric_limits<float>::quiet_NaN())), "pieces[8].score"));
  EXPECT_TRUE(contains(pieces_refusal(piece("c", 0, 9)), "pieces[8].type: 9"));
}

TEST_F(SentencePieceFiles, TooManyPiecesAreRefusedWhileReading) {
  std::string pieces;
  const std::string one = piece("x", 0);
  pieces.reserve(one.size() * (kMaxSentencePiecePieces + 1));
  for (int64_t i = 0; i <= kMaxSentencePiecePieces; ++i) pieces += one;
  EXPECT_TRUE(contains(refusal(pieces), "pieces: more than 4194304 pieces"));
}

TEST_F(SentencePieceFiles, TrainerSpecIsChecked) {
  EXPECT_TRUE(contains(trainer_refusal(7), "trainer_spec.model_type: 7 is not a model type"));
  EXPECT_TRUE(contains(trainer_refusal(1, 8), "trainer_spec.unk_id: 8 is outside the model's 8 pieces"));
  EXPECT_TRUE(contains(trainer_refusal(1, 0, 1, 1), "trainer_spec.eos_id: 1 is also trainer_spec.bos_id"));
  EXPECT_TRUE(contains(trainer_refusal(1, 0, -5), "trainer_spec.bos_id: -5"));
}

TEST_F(SentencePieceFiles, MalformedWireFormatIsRefused) {
  const std::string good = model(default_pieces(), trainer());
  EXPECT_TRUE(contains(refusal(good.substr(0, good.size() - 1)), "tokenizer.model: ModelProto: field 3 at byte"));
  EXPECT_TRUE(contains(refusal(varint_field(1, 5)), "ModelProto.pieces: has wire type 0, expected 2"));
  EXPECT_TRUE(contains(refusal(varint(2 << 3 | 3)), "has wire type 3, which no SentencePiece model uses"));
  EXPECT_TRUE(contains(refusal(bytes_field(1, "") + std::string("\x12\xFF\xFF\xFF\xFF\x0F", 6)),
                       "says 4294967295 bytes"));
}

// ---- The files --------------------------------------------------------------

TEST_F(SentencePieceFiles, FifoAndDirectoryAreRefusedWithoutBlocking) {
  const std::string fifo = path("tokenizer.model");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string message = STRATUM_ERROR_MESSAGE(SentencePieceTokenizer::load(fifo));
  EXPECT_TRUE(contains(message, fifo + ": a SentencePiece tokenizer.model must be a regular file, but this is a FIFO"));
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(SentencePieceTokenizer::load(dir_)), "but this is a directory"));
}

TEST_F(SentencePieceFiles, TokenizerConfigFlagsAreTypeChecked) {
  write_text(path("tokenizer.model"), read_text(kLlama2));
  write_text(path("tokenizer_config.json"), R"({"add_bos_token": "yes"})");
  std::string message = STRATUM_ERROR_MESSAGE(SentencePieceTokenizer::load(path("tokenizer.model")));
  EXPECT_TRUE(contains(message,
                       path("tokenizer_config.json") + ": add_bos_token is string \"yes\", expected true or false"));
  write_text(path("tokenizer_config.json"), R"({"add_eos_token": 1})");
  message = STRATUM_ERROR_MESSAGE(SentencePieceTokenizer::load(path("tokenizer.model")));
  EXPECT_TRUE(contains(message, "add_eos_token is number 1, expected true or false"));
  write_text(path("tokenizer_config.json"), R"([true])");
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(SentencePieceTokenizer::load(path("tokenizer.model"))),
                       "must be a JSON object"));
  write_text(path("tokenizer_config.json"), R"({"add_eos_token": true, "add_eos_token": false})");
  EXPECT_TRUE(contains(STRATUM_ERROR_MESSAGE(SentencePieceTokenizer::load(path("tokenizer.model"))), "add_eos_token"));
}

TEST_F(SentencePieceFiles, TokenizerConfigFlagsAreApplied) {
  write_text(path("tokenizer.model"), read_text(kLlama2));
  write_text(path("tokenizer_config.json"), R"({"add_bos_token": false, "add_eos_token": true, "bos_token": null})");
  auto tok = SentencePieceTokenizer::load(path("tokenizer.model"));
  EXPECT_TRUE(tok->prefix_tokens().empty());
  EXPECT_EQ(tok->suffix_tokens(), std::vector<int32_t>{tok->eos_id()});
  EXPECT_EQ(tok->files().size(), 2u);
}

// ---- A 1 MB word ------------------------------------------------------------

// The library's BPE and unigram encoders are linear in a word's length
// (measured: 0.1 MB in 0.08 s, 1 MB in 0.66 s on one core), so no splitting
// is needed. The bound leaves room for a loaded machine (builds running
// beside the tests triple the time); a quadratic encoder would take minutes.
TEST_F(SentencePieceFiles, OneMegabyteWordEncodesInUnderASecond) {
  auto tok = SentencePieceTokenizer::load(kLlama2);
  std::mt19937 rng(1);
  std::string random_letters(1 << 20, 'a');
  for (char& c : random_letters) c = static_cast<char>('a' + rng() % 26);
  const std::pair<const char*, std::string> words[] = {{"random letters", random_letters},
                                                       {"one letter", std::string(1 << 20, 'a')}};
  for (const auto& [kind, word] : words) {
    const auto start = std::chrono::steady_clock::now();
    const auto ids = tok->encode(word);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("1 MB word (%s): %zu ids in %.3f s\n", kind, ids.size(), seconds);
    EXPECT_FALSE(ids.empty());
    EXPECT_LT(seconds, 10.0);
  }
}

}  // namespace
}  // namespace stratum::data
