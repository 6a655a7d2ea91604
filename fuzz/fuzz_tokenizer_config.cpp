// A tokenizer_config.json from a stranger beside a fixed, valid tokenizer.json
// (the 256 byte tokens, a few merges, three added tokens, a template): the
// config's bytes -> HfTokenizer's bos/eos and template, then a text encoded
// with its special tokens. A stratum::Error is an answer; any other exception
// (nlohmann's type errors included), a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/data/hf_tokenizer.h"

namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte alphabet as the vocabulary, "th" and "the" merged, <s>, </s>
// and <|endoftext|> added; TemplateProcessing puts <s> first; no regex to compile
// (use_regex false), so each run spends its time on the config.
std::string tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    vocab[utf8(printable ? b : next++)] = b;
  }
  vocab["th"] = 256;
  vocab["the"] = 257;
  nlohmann::json added = nlohmann::json::array();
  int id = 258;
  for (const char* content : {"<s>", "</s>", "<|endoftext|>"})
    added.push_back({{"id", id++}, {"content", content}, {"special", true}});
  const nlohmann::json root = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},  // no regex: the config is what varies
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {258}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"t h", "th e"}}}}};
  return root.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string tokenizer = tokenizer_json();
  const std::string_view config(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<stratum::data::HfTokenizer> tok;
  try {
    tok = stratum::data::HfTokenizer::load_from_text(tokenizer, "fuzz/tokenizer.json", config,
                                                     "fuzz/tokenizer_config.json");
  } catch (const stratum::Error&) {
    return 0;
  }
  const int64_t vocab = tok->vocab_size();
  for (int32_t id : {tok->bos_id(), tok->eos_id()})
    if (id < -1 || id >= vocab) __builtin_trap();
  const auto ids = tok->encode_with_special_tokens("the <s>theme</s> <|endoftext|>");
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) __builtin_trap();
  (void)tok->decode(ids);
  return 0;
}
