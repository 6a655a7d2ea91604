#pragma once
// Pretokenized data other training tools write, read as they lie on disk and
// converted once into a cached Stratum token file (token_file.h), so that the
// sampler and every other reader see one format:
//
//   llm.c / nanoGPT-style shards (`.bin` with llm.c's header, dev/data/
//   data_common.py): 256 int32 — magic 20240520 (GPT-2, version 1, uint16
//   tokens) or 20240801 (LLaMA-3, version 7, uint32 tokens), version, token
//   count — then the tokens. Vocabulary 50257 or 128256.
//
//   Megatron-LM / Megatron-DeepSpeed indexed datasets (preprocess_data.py's
//   `PREFIX.bin` + `PREFIX.idx`): the .idx is "MMIDIDX\0\0", uint64 version 1,
//   uint8 dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//   7 float32, 8 uint16), uint64 sequence count S, uint64 document count D,
//   then int32 sizes[S], int64 byte pointers[S], int64 document index[D];
//   the .bin holds the sequences back to back. The converted stream keeps
//   the documents in order with their own end-of-document tokens (those
//   preprocess_data.py --append-eod wrote); the vocabulary is the largest id + 1.
//
// Every check names the file and the byte offset at fault: a wrong magic or
// version, a token count or sequence table the file's size contradicts
// (truncated; counts checked without overflow), pointers that do not follow
// the sizes, negative ids (foreign_token_headers.h, over the bytes). Each file
// must be a regular file (links followed): a FIFO or /dev/zero is refused by
// name without blocking on it.
#include <string>

namespace stratum::data {

enum class ForeignTokenFormat { none, llmc, megatron };

// What `path` is: an llm.c shard (by its magic), a Megatron dataset (PATH.idx
// and PATH.bin exist, or PATH is one of them), or neither.
ForeignTokenFormat detect_foreign_token_format(const std::string& path);

// The cached Stratum token file for a foreign source, written when
// `may_write` and missing or older than the source; otherwise only its path.
std::string convert_foreign_token_file(const std::string& path, const std::string& cache_dir, bool may_write);

}  // namespace stratum::data
