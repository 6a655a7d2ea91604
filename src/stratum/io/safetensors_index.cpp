#include "stratum/io/safetensors_index.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_file.h"
#include "stratum/core/shorten.h"

namespace stratum::io {
namespace {

constexpr const char* kKind = "a model.safetensors.index.json";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A name from the file, for a message: control bytes (NUL would end the
// message early) shown as \xNN, long names shortened.
std::string shown(std::string_view name) {
  std::string out;
  for (const char ch : name.substr(0, 200)) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u != 0x7f) {
      out += ch;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return shorten_for_message(out);
}

// A shard is a file beside the index: no directories, no way out of it.
void check_shard_name(const std::string& shard, const std::string& tensor, const std::string& path) {
  const std::string where = path + ": weight_map['" + shown(tensor) + "'] names shard '" + shown(shard) + "'";
  if (shard.find('\0') != std::string::npos) throw Error(where + ", which holds a NUL byte");
  if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
    throw Error(where + ", which is not a plain file name of the model directory ('/' or '..')");
  if (!ends_with(shard, ".safetensors") || shard.size() == std::string_view(".safetensors").size())
    throw Error(where + "; a shard is a file named *.safetensors");
}

void check_metadata(const nlohmann::json& j, const std::string& path) {
  const auto it = j.find("metadata");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) throw Error(path + ": 'metadata' is not an object");
  const auto total = it->find("total_size");
  if (total == it->end()) return;
  // Some writers store a float (1.5e10); a whole one is accepted.
  const bool integral =
      total->is_number_unsigned() || (total->is_number_integer() && total->get<int64_t>() >= 0) ||
      (total->is_number_float() && total->get<double>() >= 0 && std::floor(total->get<double>()) == total->get<double>());
  if (!integral)
    throw Error(path + ": 'metadata.total_size' is " + shorten_for_message(total->dump()) +
                "; expected a byte count (a non-negative integer)");
}

}  // namespace

std::map<std::string, std::vector<std::string>> parse_safetensors_index(std::string_view text,
                                                                        const std::string& path) {
  const nlohmann::json j = parse_json_text(text, path, kKind);
  if (!j.is_object()) throw Error(path + ": not a JSON object; " + std::string(kKind) + " is {\"weight_map\": {...}}");
  check_metadata(j, path);
  const auto map = j.find("weight_map");
  if (map == j.end() || !map->is_object()) throw Error(path + ": no 'weight_map' object (tensor name -> shard file)");
  if (map->empty()) throw Error(path + ": 'weight_map' names no tensors");
  if (map->size() > kMaxSafetensorsIndexTensors)
    throw Error(path + ": 'weight_map' names " + std::to_string(map->size()) + " tensors, above the limit of " +
                std::to_string(kMaxSafetensorsIndexTensors) + "; probably not a model's index");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [tensor, shard] : map->items()) {
    if (tensor.empty()) throw Error(path + ": weight_map has an empty tensor name");
    if (!shard.is_string())
      throw Error(path + ": weight_map['" + shown(tensor) + "'] is " + shorten_for_message(shard.dump()) +
                  "; expected a shard file name");
    const std::string& name = shard.get_ref<const std::string&>();
    check_shard_name(name, tensor, path);
    by_shard[name].push_back(tensor);
    if (by_shard.size() > kMaxSafetensorsIndexShards)
      throw Error(path + ": weight_map names more than " + std::to_string(kMaxSafetensorsIndexShards) +
                  " shard files; probably not a model's index");
  }
  return by_shard;
}

std::map<std::string, std::vector<std::string>> read_safetensors_index(const std::string& path) {
  // A FIFO, device or directory, or a file over the cap, refused before reading.
  const std::string text = fs::read_regular_file(path, kMaxSafetensorsIndexBytes, kKind);
  return parse_safetensors_index(text, path);
}

}  // namespace stratum::io
