#pragma once
// Reading JSON text from a file or a string, with errors that name the file and
// the line and column of a syntax error.
#include <string>

#include <nlohmann/json.hpp>

namespace stratum::config {

// A ds_config.json is a few kB; anything this large is the wrong file.
inline constexpr size_t kMaxConfigFileBytes = 16u << 20;

// Throws ConfigError: empty text, nesting deeper than kMaxJsonDepth (with the
// line:column where it goes too deep), invalid JSON, or a key given twice.
nlohmann::json parse_json_text(const std::string& text, const std::string& source);
// Also: a missing file, one that is not a regular file (FIFO, device,
// directory: refused without reading), over kMaxConfigFileBytes, or unreadable.
nlohmann::json read_json_file(const std::string& path);

}  // namespace stratum::config
