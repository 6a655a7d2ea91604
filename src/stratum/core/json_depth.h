#pragma once
// A linear pre-check of JSON nesting before a parser sees the text: a config,
// manifest or safetensors header nested thousands deep is an attack or a
// mistake, and parsers (and the paths their error messages build) grow with
// the depth. Strings are skipped with their escapes; the text need not be valid.
#include <cstddef>
#include <optional>
#include <string_view>

namespace stratum {

// Deep enough for any real config, manifest or header.
inline constexpr int kMaxJsonDepth = 64;

// The byte offset of the first '{' or '[' outside a string that opens level
// max_depth + 1; nullopt when the text stays within max_depth levels.
std::optional<size_t> find_excess_json_nesting(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace stratum
