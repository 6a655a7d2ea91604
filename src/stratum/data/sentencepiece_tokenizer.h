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
  // Reads model_path as a regular file of at most kMaxSentencePieceModelBytes
  // (a FIFO or device refused by name), then as load_from_bytes, and the
  // tokenizer_config.json beside it if any. Throws stratum::Error naming the
  // file; also, saying how to get it, in a build without libsentencepiece.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& model_path);
  // A serialized model: check_sentencepiece_model first (the library trusts
  // the file's normalizer data and reads out of bounds on a bad one), then
  // libsentencepiece. No tokenizer_config.json: BOS added, EOS not.
  // `path_for_messages` names it in errors and files().
  static std::unique_ptr<SentencePieceTokenizer> load_from_bytes(const std::string& bytes,
                                                                 const std::string& path_for_messages);
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
