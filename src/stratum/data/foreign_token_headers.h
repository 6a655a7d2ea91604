#pragma once
// The checks of pretokenized files other tools write (foreign_token_files.h),
// over their bytes: every count the file states checked against its size
// without overflow before anything is read at the offsets it implies, so a
// reader that passes them cannot leave the bytes. Plain C++, no torch (the
// fuzz build links it).
#include <cstddef>
#include <cstdint>
#include <string>

namespace stratum::data {

inline constexpr int32_t kLlmcGpt2Magic = 20240520, kLlmcLlama3Magic = 20240801;
// The token llm.c's scripts put before each document: <|endoftext|> (GPT-2),
// <|begin_of_text|> (LLaMA-3).
inline constexpr int64_t kLlmcGpt2Delimiter = 50256, kLlmcLlama3Delimiter = 128000;
inline constexpr uint64_t kLlmcHeaderBytes = 256 * 4;

struct LlmcShardInfo {
  int width = 0;       // bytes per token: 2 (GPT-2) or 4 (LLaMA-3)
  int64_t vocab = 0;   // 50257 or 128256
  int64_t count = 0;   // tokens after the header
};

// Throws stratum::Error naming `path` and the byte: a magic and version that
// are not llm.c's, a token count that is not positive or that the file's
// size contradicts (truncated, or bytes after the tokens).
LlmcShardInfo check_llmc_shard(const uint8_t* data, size_t size, const std::string& path);

// Token i of a checked shard (i < info.count).
int64_t llmc_token(const uint8_t* data, const LlmcShardInfo& info, int64_t i);

inline constexpr uint64_t kMegatronTableOffset = 34;  // after magic, version, dtype code, the two counts

struct MegatronIndexInfo {
  int code = 0;              // Megatron's dtype code
  int width = 0;             // bytes per token
  uint64_t sequences = 0;    // S
  uint64_t documents = 0;    // D
  uint64_t token_bytes = 0;  // the sequences' bytes back to back: the whole .bin
};

// Checks a Megatron .idx against itself and against the size of its .bin:
// magic, version, an integer dtype, S * 12 + D * 8 table bytes exactly the
// rest of the index (each product checked by division first), every sequence
// size non-negative and its pointer right after the sequence before it, the
// last ending at the .bin's end, the document index starting at 0 and never
// going back or past S. Throws stratum::Error naming the file and the byte.
MegatronIndexInfo check_megatron_index(const uint8_t* idx, size_t idx_size, uint64_t bin_size,
                                       const std::string& idx_path, const std::string& bin_path);

// Sequence s of a checked index (s < info.sequences): its size in tokens and
// its byte offset in the .bin.
int32_t megatron_sequence_size(const uint8_t* idx, const MegatronIndexInfo& info, uint64_t s);
int64_t megatron_sequence_pointer(const uint8_t* idx, const MegatronIndexInfo& info, uint64_t s);

// Entry d of a checked index's document index (d < info.documents): the
// sequence where document d begins (0 first; the last entry is usually S,
// the end of the last document).
int64_t megatron_document(const uint8_t* idx, const MegatronIndexInfo& info, uint64_t d);

// The token at byte `at` of a .bin whose index passed the check (at +
// info.width <= info.token_bytes), as a signed id.
int64_t megatron_token(const uint8_t* bin, const MegatronIndexInfo& info, uint64_t at);

}  // namespace stratum::data
