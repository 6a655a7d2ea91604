#pragma once
// What the tokenizers that read other projects' files share: the file's bytes,
// the tokenizer_config.json beside it, and the hash that names the tokenizer.
// These files come from downloads, so every read is size-capped and refuses
// a FIFO, device or directory without blocking on it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::data::detail {

// tokenizer.json files are up to ~30 MB today (vocabularies of 250k tokens);
// tokenizer.model files are smaller. Far above both, far below exhausting memory.
inline constexpr size_t kMaxTokenizerFileBytes = size_t{512} << 20;
// tokenizer_config.json: a few KB, up to a few MB with chat templates.
inline constexpr size_t kMaxTokenizerConfigBytes = size_t{16} << 20;

// A tokenizer file's bytes; throws stratum::Error naming the path.
inline std::string read_bytes(const std::string& path, size_t max_bytes = kMaxTokenizerFileBytes,
                              const std::string& what = "a tokenizer file") {
  return fs::read_regular_file(path, max_bytes, what);
}

// The tokenizer_config.json in the directory of `path`.
inline std::string tokenizer_config_beside(const std::string& path) {
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "tokenizer_config.json";
}

inline uint64_t fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// "<prefix><vocab>-<8 hex digits of hash>".
inline std::string tokenizer_name(const std::string& prefix, int64_t vocab, uint64_t hash) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(hash ^ (hash >> 32)));
  return prefix + std::to_string(vocab) + "-" + hex;
}

}  // namespace stratum::data::detail
