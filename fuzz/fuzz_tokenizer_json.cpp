// A tokenizer.json from a stranger: its bytes -> HfTokenizer (ids, types,
// nesting, regular expressions all checked), then a few fixed texts encoded
// with and without special tokens and decoded, and stray ids decoded. A
// stratum::Error is an answer; any other exception (nlohmann's included), a
// crash, a hang (a regular expression's work is budgeted) or a sanitizer
// report is a bug. Accepted files must give ids inside the vocabulary.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "stratum/core/error.h"
#include "stratum/data/hf_tokenizer.h"

namespace {

// Texts crossing the regex window (256 bytes) with runs of each class, special tokens, and bytes that are not UTF-8.
const std::string& long_text() {
  static const std::string text = std::string(300, ' ') + "x" + std::string(300, 'a') + "<|endoftext|>" +
                                  std::string(280, '7') + " \n\n\t " + std::string(270, '!') + "'s 'll";
  return text;
}

void encode_and_decode(const stratum::data::HfTokenizer& tok, std::string_view text) {
  const int64_t vocab = tok.vocab_size();
  for (const auto& ids : {tok.encode(text), tok.encode_with_special_tokens(text)}) {
    for (int32_t id : ids)
      if (id < 0 || id >= vocab) __builtin_trap();
    (void)tok.decode(ids);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<stratum::data::HfTokenizer> tok;
  try {
    tok = stratum::data::HfTokenizer::load_from_text(text, "fuzz/tokenizer.json");
  } catch (const stratum::Error&) {
    return 0;
  }
  for (std::string_view sample : {std::string_view("Hello world, it's 2024!"),
                                  std::string_view("<|begin_of_text|>a<|endoftext|>b<|end_of_text|><s></s>"),
                                  std::string_view("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xFF\xFE\x80 end"),
                                  std::string_view(""), std::string_view(long_text())}) {
    try {
      encode_and_decode(*tok, sample);
    } catch (const stratum::Error&) {  // a pattern over its work budget
    }
  }
  const int32_t last = static_cast<int32_t>(tok->vocab_size() - 1);
  (void)tok->decode({-1, 0, 1, 255, 256, last, last + 1, INT32_MAX, INT32_MIN});
  (void)tok->name();
  (void)tok->prefix_tokens();
  (void)tok->suffix_tokens();
  return 0;
}
