#include "stratum/config/json_source.h"

#include "stratum/core/json_file.h"

namespace stratum::config {

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  return stratum::parse_json_text(text, source, "a ds_config.json");
}

nlohmann::json read_json_file(const std::string& path) {
  return stratum::read_json_file(path, kMaxConfigFileBytes, "a ds_config.json");
}

}  // namespace stratum::config
