#pragma once
// Reading JSON text from a file or a string, with errors that name the file and
// the line and column of a syntax error.
#include <string>

#include <nlohmann/json.hpp>

namespace stratum::config {

// Throws ConfigError: missing or unreadable file, empty file, or invalid JSON.
nlohmann::json parse_json_text(const std::string& text, const std::string& source);
nlohmann::json read_json_file(const std::string& path);

}  // namespace stratum::config
