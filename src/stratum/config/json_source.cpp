#include "stratum/config/json_source.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::config {
namespace {

// nlohmann reports a byte offset; users want line:column.
std::string line_column(const std::string& text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw ConfigError(source, {"the file is empty; a ds_config.json is a JSON object {...}"});
  try {
    return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: ..."; keep the reason.
    std::string reason = e.what();
    auto pos = reason.find(": ");
    if (pos != std::string::npos) reason = reason.substr(pos + 2);
    throw ConfigError(source + ":" + line_column(text, e.byte), {"invalid JSON: " + reason});
  }
}

nlohmann::json read_json_file(const std::string& path) {
  if (!fs::exists(path)) throw ConfigError(path, {"no such file"});
  if (fs::is_directory(path)) throw ConfigError(path, {"is a directory, not a JSON file"});
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, {std::string("cannot open: ") + std::strerror(errno)});
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(path, {std::string("cannot read: ") + std::strerror(errno)});
  return parse_json_text(ss.str(), path);
}

}  // namespace stratum::config
