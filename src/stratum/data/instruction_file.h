#pragma once
// The cache of tokenized instruction examples: every example's tokens and
// loss mask, written once and mapped by every rank. Plain C++, no torch.
//
//   offset  size  field
//        0     8  magic "STRINS1\0"
//        8     4  version (1)
//       12     4  zero
//       16     8  example count N
//       24     8  token count T
//       32     8  vocabulary size of the tokenizer that wrote it
//       40     8  hash of the chat format (template text and variables; 0 without one)
//       48    32  tokenizer name, NUL-padded
//       80    48  zero
//      128        N + 1 int64 offsets (example i is tokens [offsets[i], offsets[i+1]))
//                 T int32 tokens, then T uint8 loss mask (0 or 1)
#include <cstdint>
#include <string>
#include <vector>

#include "stratum/core/mapped_file.h"
#include "stratum/data/instruction_example.h"

namespace stratum::data {

inline constexpr char kInstructionFileMagic[8] = {'S', 'T', 'R', 'I', 'N', 'S', '1', '\0'};
inline constexpr uint32_t kInstructionFileVersion = 1;
inline constexpr int64_t kInstructionFileHeaderBytes = 128;

struct InstructionFileInfo {
  int64_t examples = 0, tokens = 0, vocab_size = 0;
  uint64_t format_hash = 0;
  std::string tokenizer_name;
};

// Writes the examples atomically (temporary file + rename). Throws
// stratum::Error naming the path (a name over 31 bytes, an id outside the
// vocabulary, no examples, a write error).
void write_instruction_file(const std::string& path, const std::vector<InstructionExample>& examples,
                            const std::string& tokenizer_name, int64_t vocab_size, uint64_t format_hash);

// Checks a file's bytes: magic, version, sizes that add up (without
// overflow), offsets from 0 rising to T with no empty example, every id
// below the vocabulary size, every mask 0 or 1. Throws stratum::Error naming
// `path` and what is wrong.
InstructionFileInfo check_instruction_file(const unsigned char* bytes, uint64_t size, const std::string& path);

// A checked instruction file, mapped read-only. Move-only.
class InstructionFile {
 public:
  explicit InstructionFile(const std::string& path);
  const InstructionFileInfo& info() const { return info_; }
  const std::string& path() const { return file_.path(); }
  int64_t size() const { return info_.examples; }
  int64_t length(int64_t example) const;
  // Tokens and mask of [start, start + count) of an example (clipped by the caller).
  void read(int64_t example, int64_t start, int64_t count, int64_t* tokens, uint8_t* loss_mask) const;
  std::vector<int64_t> lengths() const;

 private:
  int64_t offset(int64_t i) const;
  MappedFile file_;
  InstructionFileInfo info_;
};

}  // namespace stratum::data
