#pragma once
// Byte-level BPE: the 256 byte values plus merges learned from a corpus.
// Plain C++, no torch.
//
// Text is first cut into chunks (GPT-2's idea, simplified to byte classes): a
// run of letters (ASCII letters and every byte >= 0x80, so UTF-8 characters
// stay inside words), of digits, or of punctuation, each with at most one
// leading space; or a run of other whitespace. Chunks longer than 64 bytes are
// cut. Merges never cross a chunk boundary, so " the" can become one token
// but "e." cannot. Any bytes round-trip exactly: decode(encode(s)) == s.
//
// Merges file (text): a line "stratum-bpe 1 <vocab_size>", then one merge per
// line, "<left id> <right id>"; merge i makes id 256 + i.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stratum/data/load_tokenizer.h"
#include "stratum/data/tokenizer.h"

namespace stratum::data {

class BpeTokenizer final : public Tokenizer {
 public:
  // Learns vocab_size - 256 merges from `text` (fewer if no pair occurs twice
  // any more: vocab_size() then reports the smaller size). Deterministic: the
  // most frequent pair wins, ties go to the smallest (left, right).
  static BpeTokenizer train(std::string_view text, int64_t vocab_size);
  // Throws stratum::Error naming the file and line on a malformed file.
  static BpeTokenizer load(const std::string& path);
  // Atomic (temporary file + rename).
  void save(const std::string& path) const;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Ids outside the vocabulary decode to U+FFFD.
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return 256 + static_cast<int64_t>(merges_.size()); }
  // "bpe<vocab>-<8 hex digits of a hash of the merges>": a retrained
  // tokenizer gets another name, so token caches made with the old one are
  // rebuilt.
  std::string name() const override { return name_; }

  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  explicit BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges);
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int32_t> rank_;  // (left << 32 | right) -> merge index
  std::vector<std::string> bytes_;              // id -> the bytes it stands for
  std::string name_;
};

// Cuts text into the chunks described above; exposed for tests.
std::vector<std::string_view> bpe_chunks(std::string_view text);

}  // namespace stratum::data
