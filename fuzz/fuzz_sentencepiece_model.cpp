// A tokenizer.model: bytes -> Stratum's check of the ModelProto -> if it is
// accepted, libsentencepiece loads it and encodes and decodes a few fixed
// strings, so a crash inside the library that the check lets through is found
// here. A stratum::Error is an answer; any other exception, a crash, a hang or
// a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/data/sentencepiece_tokenizer.h"

namespace {

// Text that reaches the normalizer's trie and the models' paths: ASCII,
// spaces to collapse, NFKC-foldable full-width letters and ligatures, CJK,
// a NUL, and malformed UTF-8.
const char* const kTexts[] = {
    "Hello world",
    "  two  spaces \t tab\n",
    "\xEF\xBD\x86\xEF\xBD\x95\xEF\xBD\x8C\xEF\xBD\x8C \xEF\xAC\x81 \xE2\x91\xA0",
    "\xE6\x95\xB0\xE6\x8D\xAE \xCE\xBB\xCF\x8C\xCE\xB3\xCE\xBF\xCF\x82 caf\xC3\xA9",
    "a\0b",
    "\xFF\xFE\xC3 broken \xE2\x96",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<stratum::data::SentencePieceTokenizer> tokenizer;
  try {
    tokenizer = stratum::data::SentencePieceTokenizer::load_from_bytes(bytes, "fuzz/tokenizer.model");
  } catch (const stratum::Error&) {
    return 0;
  }
  for (const char* text : kTexts) {
    const std::string s = text == kTexts[4] ? std::string(text, 3) : std::string(text);
    try {
      const auto ids = tokenizer->encode(s);
      (void)tokenizer->decode(ids);
    } catch (const stratum::Error&) {
    }
  }
  // Ids the model has and has not: every piece decodes, others are U+FFFD.
  std::vector<int32_t> ids;
  for (int64_t id = -2; id < tokenizer->vocab_size() + 2 && id < 1000; ++id) ids.push_back(static_cast<int32_t>(id));
  (void)tokenizer->decode(ids);
  (void)tokenizer->prefix_tokens();
  (void)tokenizer->suffix_tokens();
  return 0;
}
