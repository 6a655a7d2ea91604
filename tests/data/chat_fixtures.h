#pragma once
// The fixtures of tests/data/chat_templates/ (written by its make_fixtures.py
// with transformers): the cases file, the templates, the small tokenizers.
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace stratum::data::test {

inline const std::string kChatDir = std::string(STRATUM_TEST_DATA_DIR) + "/chat_templates";

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// cases.json: every case transformers rendered (and tokenized).
inline const nlohmann::ordered_json& chat_cases() {
  static const nlohmann::ordered_json all = nlohmann::ordered_json::parse(slurp(kChatDir + "/cases.json"));
  return all;
}

}  // namespace stratum::data::test
