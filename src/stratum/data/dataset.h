#pragma once
// From what --data names to an open token file. Plain C++, no torch.
//
// --data may name
//   - a Stratum token file: used as is;
//   - a .txt file, or a directory whose *.txt files (not recursive, in byte
//     order of their names) are its documents: each gets the tokenizer's
//     special tokens (BOS before, EOS after); a tokenizer without an EOS (the
//     byte one) joins them with a newline where one lacks it;
//   - a .jsonl file, one {"text": ...} document per line (the tokenizer must
//     have an EOS; a bad line is an error naming the file, line and byte);
//   each tokenized on every core into a cached token file, rebuilt when a
//   source file (or the directory) is newer than the cache or the cache was
//   made by another tokenizer.
//
// Several ranks: only one process per node (local rank 0) may build the
// cache. Every rank calls prepare_token_file with may_write = (local_rank ==
// 0), the caller barriers, then every rank opens the returned path:
//
//   auto path = data::prepare_token_file(arg, tok, {cache_dir, local_rank == 0});
//   world.barrier();
//   data::TokenFile file(path);
//
// Every file is read as a regular file only (links followed): a FIFO, a
// device (a link to /dev/zero), a socket, given as --data or as a *.txt in
// the directory, is refused by name without blocking on it; a directory's
// subdirectories are skipped. A .jsonl line longer than kMaxJsonlLineBytes
// is refused; a text file of any size is streamed in bounded pieces.
//
// The checks of the source (missing, no .txt files, 0 bytes of text) run on
// every rank, writer or not, so a bad --data fails everywhere alike. Caches
// are written atomically (temporary file + rename), so nodes sharing a file
// system that build the same cache at once do not corrupt it.
#include <string>

#include "stratum/data/jsonl_record.h"
#include "stratum/data/token_file.h"
#include "stratum/data/tokenizer.h"

namespace stratum::data {

struct DatasetOptions {
  // Where text caches go; empty: next to the text (`<text>.<tokenizer>.strtok`).
  std::string cache_dir;
  // Build the cache if needed; false: only compute its path.
  bool may_write = true;
  // The longest line a .jsonl source may have (tests lower it).
  size_t max_jsonl_line_bytes = kMaxJsonlLineBytes;
};

// True for a .txt or .jsonl file or a directory (what prepare_token_file
// tokenizes).
bool is_text_source(const std::string& data_path);

// Where the cache of a text source goes. In cache_dir its name carries a hash
// of the text's absolute path, so sources with the same name do not collide.
std::string text_cache_path(const std::string& data_path, const Tokenizer& tokenizer, const std::string& cache_dir);

// llm.c shards and Megatron datasets (foreign_token_files.h) are converted
// into a cached token file the same way (rebuilt when the source is newer).
// The token file to open for data_path (see above). Throws stratum::Error
// naming the path when it is missing, a directory without .txt files, or text
// that is empty (0 bytes), or when the cache cannot be written.
std::string prepare_token_file(const std::string& data_path, const Tokenizer& tokenizer,
                               const DatasetOptions& options = {});

// One process: prepare_token_file, then open. The caller compares
// file.vocab_size() with its model's vocabulary.
TokenFile prepare_dataset(const std::string& data_path, const Tokenizer& tokenizer,
                          const DatasetOptions& options = {});

}  // namespace stratum::data
