#pragma once
// A SentencePiece model (`tokenizer.model`, as Llama-2 and Mistral ship),
// through libsentencepiece. Plain C++, no torch.
//
// encode() is SentencePiece's own (its normalizer, dummy prefix, byte
// fallback); encode_with_special_tokens() adds BOS and EOS as Llama-2's
// Hugging Face tokenizer does: add_bos_token (default true) and add_eos_token
// (default false) from a tokenizer_config.json beside the model.
// decode(encode(s)) == s where the model's normalizer is the identity and it
// keeps whitespace (remove_extra_whitespaces false), as Llama-2's does.
#include <memory>
#include <string>

#include "stratum/data/tokenizer.h"

namespace stratum::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws stratum::Error naming the file; also, saying how to get it, in a
  // build without libsentencepiece.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> prefix_tokens() const override;
  std::vector<int32_t> suffix_tokens() const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  // "spm<vocab>-<8 hex digits of a hash of the model file>".
  std::string name() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  std::vector<std::string> files() const override;

  struct Impl;

 private:
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when this build can load tokenizer.model files (it found libsentencepiece).
bool sentencepiece_available();

}  // namespace stratum::data
