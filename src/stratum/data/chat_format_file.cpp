#include "stratum/data/chat_format_file.h"

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_file.h"

namespace stratum::data {
namespace {

constexpr size_t kMaxConfigBytes = size_t{64} << 20;
constexpr size_t kMaxTemplateBytes = size_t{4} << 20;

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

ChatFormat load_chat_format(const std::string& tokenizer_config, const std::string& template_file) {
  nlohmann::json config = nlohmann::json::object();
  if (tokenizer_config.empty() && template_file.empty())
    throw Error("a chat format needs a tokenizer_config.json or a chat template file");
  if (!tokenizer_config.empty()) {
    try {
      config = read_json_file(tokenizer_config, kMaxConfigBytes, "a tokenizer_config.json");
    } catch (const ConfigError& e) {
      std::string problems;
      for (const auto& p : e.problems()) problems += (problems.empty() ? "" : "; ") + p;
      throw Error(e.source() + ": " + problems);
    }
  }
  if (!config.is_object()) throw Error(tokenizer_config + ": not a JSON object");
  std::string text, name;
  const std::string beside = directory_of(tokenizer_config) + "/chat_template.jinja";
  if (!template_file.empty()) {
    text = fs::read_regular_file(template_file, kMaxTemplateBytes, "a chat template");
    name = template_file;
  } else if (fs::is_regular_file(beside)) {
    text = fs::read_regular_file(beside, kMaxTemplateBytes, "a chat template");
    name = beside;
  } else if (config.contains("chat_template") && config["chat_template"].is_string()) {
    text = config["chat_template"].get<std::string>();
    name = tokenizer_config + " chat_template";
  } else if (config.contains("chat_template") && config["chat_template"].is_array()) {
    for (const auto& entry : config["chat_template"]) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
          !entry["template"].is_string())
        throw Error(tokenizer_config + ": chat_template: each entry of the list must be {\"name\": str, \"template\": str}");
      if (entry["name"] == "default") {
        text = entry["template"].get<std::string>();
        name = tokenizer_config + " chat_template (default)";
      }
    }
    if (name.empty()) throw Error(tokenizer_config + ": chat_template: the list has no template named \"default\"");
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    throw Error(tokenizer_config + ": chat_template is neither a string nor a list of named templates");
  } else {
    throw Error(tokenizer_config + ": no chat template (no \"chat_template\" key, no chat_template.jinja beside it); "
                                   "conversations need one");
  }
  ChatFormat format;
  format.chat_template = std::make_shared<ChatTemplate>(text, name);
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key) || config[key].is_null()) continue;
    const auto& v = config[key];
    if (v.is_string()) {
      variables[key] = v.get<std::string>();
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      variables[key] = v["content"].get<std::string>();
    } else {
      throw Error(tokenizer_config + ": " + key + " is neither a string nor {\"content\": str}");
    }
  }
  format.variables_json = variables.dump();
  return format;
}

}  // namespace stratum::data
