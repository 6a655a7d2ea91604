#pragma once
// Instruction data from a JSON Lines file (TRL's prompt-completion or
// messages records, see instruction_example.h), tokenized once into a cached
// instruction file (instruction_file.h) that every rank maps. Plain C++, no
// torch.
//
// Several ranks: as prepare_token_file (dataset.h), only local rank 0 builds
// the cache; every rank calls with may_write = (local_rank == 0), the caller
// barriers, then every rank opens the returned path. The cache is rebuilt
// when the source is newer, or it was made by another tokenizer or chat
// format (template text and variables); it is written atomically. The file
// is read as a regular file only, each line capped (kMaxJsonlLineBytes), and
// every bad line is an error naming file:line (byte).
#include <string>

#include "stratum/data/instruction_example.h"
#include "stratum/data/jsonl_record.h"

namespace stratum::data {

struct InstructionDataOptions {
  // Where the cache goes; empty: next to the source (`<source>.<tokenizer>.<format>.strins`).
  std::string cache_dir;
  bool may_write = true;
  size_t max_line_bytes = kMaxJsonlLineBytes;
  InstructionForm form = InstructionForm::any;  // what every record must be
};

std::string instruction_cache_path(const std::string& jsonl_path, const Tokenizer& tokenizer, const ChatFormat* chat,
                                   const std::string& cache_dir, InstructionForm form = InstructionForm::any);

// The cache to open for `jsonl_path` (built if needed and may_write). Empty
// lines are skipped. stats, when given, receives what the build counted (all
// zero when the cache was already fresh). Throws stratum::Error naming the
// file and line.
std::string prepare_instruction_data(const std::string& jsonl_path, const Tokenizer& tokenizer, const ChatFormat* chat,
                                     const InstructionDataOptions& options = {}, InstructionStats* stats = nullptr);

}  // namespace stratum::data
