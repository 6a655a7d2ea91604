#pragma once
// Tokenizers: text <-> token ids. Plain C++, no torch.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace stratum::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Never throws: ids the tokenizer does not know decode to U+FFFD.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // Recorded in token files, so a cache made by another tokenizer is rebuilt.
  // At most 31 bytes.
  virtual std::string name() const = 0;

  // Special tokens as the tokenizer's own files say; -1 where it has none.
  virtual int32_t bos_id() const { return -1; }
  virtual int32_t eos_id() const { return -1; }
  // What the tokenizer's own encoding puts before and after a text with its
  // special tokens (Hugging Face's add_special_tokens=True: a template that
  // prepends <|begin_of_text|>; Llama-2's BOS). None by default.
  virtual std::vector<int32_t> prefix_tokens() const { return {}; }
  virtual std::vector<int32_t> suffix_tokens() const { return {}; }
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const;
  // The files it was read from (tokenizer.json or tokenizer.model, and the
  // tokenizer_config.json beside it when there is one): what a checkpoint
  // keeps and an exported model directory carries. None for built-in ones.
  virtual std::vector<std::string> files() const { return {}; }
};

// One training document: encode_with_special_tokens(text), then the EOS
// (when the tokenizer has one and the encoding does not end with it), so
// documents stay apart in a token stream.
std::vector<int32_t> encode_document(const Tokenizer& tokenizer, std::string_view text);

// One token per byte: id = byte value (0..255). encode() never fails and
// decode(encode(s)) == s for any bytes, UTF-8 or not. decode() maps ids
// outside 0..255 to U+FFFD ("\xEF\xBF\xBD"), one per id; it does not repair
// byte sequences that are invalid UTF-8 (see to_valid_utf8 for printing).
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "byte"; }
};

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD, for printing
// what a model generated (a byte model can emit half a character).
std::string to_valid_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

}  // namespace stratum::data
