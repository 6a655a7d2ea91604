#pragma once
// A Hugging Face `tokenizer.json` with a byte-level BPE model, as GPT-2,
// Llama-3 and most newer models ship. Plain C++, no torch; the pre-tokenizer's
// regular expressions run on PCRE2 with Unicode classes (UTF + UCP).
//
// What encode() does, in the `tokenizers` library's order:
//   1. the added tokens (<|endoftext|>, <|begin_of_text|>, ...) are cut out of
//      the text where they occur, leftmost first, longest on a tie, and become
//      their ids;
//   2. the pre-tokenizer cuts the rest: `Split` with a regex (behaviour
//      Isolated or Removed), `ByteLevel` (GPT-2's regex when use_regex,
//      add_prefix_space), or a `Sequence` of these;
//   3. each piece's bytes map to GPT-2's byte alphabet and BPE merges them,
//      lowest merge rank first (a piece that is a vocabulary entry is taken
//      whole under `ignore_merges`, as Llama-3's file says).
// Text that is not valid UTF-8 is first made valid (each bad byte becomes
// U+FFFD), as Python's decode(errors="replace") would: `tokenizers` takes
// only valid text. decode() inverts the byte mapping, so decode(encode(s)) ==
// s for valid UTF-8 s.
//
// What the file says and this class does not do is an error naming the key:
// a normalizer, other models (WordPiece, Unigram) or pre-tokenizers
// (Metaspace: pass Llama-2's tokenizer.model instead), BPE dropout, byte
// fallback, subword prefixes, added tokens with lstrip/rstrip/single_word.
//
// The file is untrusted input: ids are checked before use (integers, unique,
// nearly contiguous, below 2^24), every value's type is checked and an error
// names the key path, nesting is capped, and the file's regular expressions
// run under limits: PCRE2's per-match limits, and a budget on the total work
// of one encode() proportional to the text (a pattern that reads ahead to the
// end of the text at every match is an error, not a quadratic hang). BPE
// merges with a priority queue: O(n log n) for an n-byte piece.
//
// Special tokens: `tokenizer_config.json` beside the file names bos_token and
// eos_token (strings or {"content": ...}) and may set add_bos_token /
// add_eos_token; the post-processor's template (TemplateProcessing, alone or
// in a Sequence) says what encode_with_special_tokens adds.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stratum/data/tokenizer.h"

namespace stratum::data {

class HfTokenizer final : public Tokenizer {
 public:
  // Throws stratum::Error naming the file and key. Also throws, saying how to
  // get it, in a build without PCRE2.
  static std::unique_ptr<HfTokenizer> load(const std::string& tokenizer_json);
  // The same from texts already read: `source` names tokenizer.json in
  // messages; when config_source is not empty, config_json is the text of the
  // tokenizer_config.json it names.
  static std::unique_ptr<HfTokenizer> load_from_text(std::string_view tokenizer_json, const std::string& source,
                                                     std::string_view config_json = {},
                                                     const std::string& config_source = {});
  ~HfTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> prefix_tokens() const override;
  std::vector<int32_t> suffix_tokens() const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  // "hf<vocab>-<8 hex digits of a hash of tokenizer.json and its config>".
  std::string name() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  std::vector<std::string> files() const override;

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when this build can load tokenizer.json files (it found PCRE2).
bool hf_tokenizer_available();

}  // namespace stratum::data
