#pragma once
// What the tokenizers that read other projects' files share: the file's bytes,
// the tokenizer_config.json beside it, and the hash that names the tokenizer.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "stratum/core/error.h"

namespace stratum::data::detail {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
