#include "stratum/io/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "stratum/core/error.h"
#include "stratum/core/json_depth.h"
#include "stratum/core/shorten.h"

namespace stratum::io {

using Json = nlohmann::json;

namespace {

struct DTypeSize {
  const char* name;
  size_t bytes;
};
constexpr DTypeSize kDTypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Names come from the file: a megabyte name is shown shortened.
std::string tensor_where(const std::string& path, const std::string& name) {
  return path + ": tensor '" + shorten_for_message(name, 200) + "'";
}

SafetensorsTensorInfo parse_entry(const std::string& path, const std::string& name, const Json& j) {
  const std::string where = tensor_where(path, name);
  if (!j.is_object()) throw Error(where + ": header entry is not an object");
  SafetensorsTensorInfo e;
  e.name = name;
  const auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string()) throw Error(where + ": 'dtype' missing or not a string");
  e.dtype = dtype->get<std::string>();
  const size_t element_size = safetensors_element_size(e.dtype);
  if (element_size == 0)
    throw Error(where + ": unknown dtype '" + shorten_for_message(e.dtype) + "' (known: " + safetensors_dtype_names() +
                ")");
  const auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array()) throw Error(where + ": 'shape' missing or not an array");
  for (const auto& s : *shape) {
    // A size over 2^63 - 1 would turn negative as an int64 dimension.
    if (!s.is_number_unsigned() || s.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(where + ": shape " + shorten_for_message(shape->dump(), 200) + " is not a list of sizes");
    e.shape.push_back(s.get<int64_t>());
  }
  const auto off_it = j.find("data_offsets");
  const Json& off = off_it != j.end() ? *off_it : Json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw Error(where + ": 'data_offsets' must be [begin, end]");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin)
    throw Error(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                "] end before they begin");
  uint64_t bytes = element_size;
  for (int64_t s : e.shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(s), &bytes))
      throw Error(where + ": shape " + shape_str(e.shape) + " overflows");
  if (bytes != e.end - e.begin)
    throw Error(where + ": shape " + shape_str(e.shape) + " of " + e.dtype + " needs " + std::to_string(bytes) +
                " bytes but data_offsets cover " + std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

size_t safetensors_element_size(std::string_view dtype) {
  for (const auto& d : kDTypes)
    if (dtype == d.name) return d.bytes;
  return 0;
}

std::string safetensors_dtype_names() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

uint64_t safetensors_header_length(const unsigned char prefix[8], uint64_t file_size, const std::string& path) {
  if (file_size < 8)
    throw Error(path + ": truncated safetensors file (" + std::to_string(file_size) +
                " bytes; it must start with an 8-byte header length)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];  // little-endian
  if (n > kMaxSafetensorsHeaderLength)
    throw Error(path + ": header length " + std::to_string(n) + " is over the format's limit of 100,000,000 bytes "
                "(not a safetensors file?)");
  if (n > file_size - 8)
    throw Error(path + ": header length " + std::to_string(n) + " goes beyond the file (" + std::to_string(file_size) +
                " bytes): truncated or not a safetensors file");
  return n;
}

SafetensorsHeaderInfo parse_safetensors_header(std::string_view text, uint64_t data_length, const std::string& path) {
  SafetensorsHeaderInfo h;
  h.header_length = text.size();
  h.data_length = data_length;
  // Before the parser: its time grows with the depth, and no header nests more than 3 levels.
  if (const auto at = find_excess_json_nesting(text))
    throw Error(path + ": bad JSON header: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (at byte " +
                std::to_string(8 + *at) + " of the file)");
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw Error(path + ": bad JSON header: " + e.what());
  }
  if (!j.is_object()) throw Error(path + ": the JSON header is not an object");
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const Json& value = item.value();
    if (key == "__metadata__") {
      if (!value.is_object()) throw Error(path + ": '__metadata__' is not an object");
      for (const auto& m : value.items()) {
        if (!m.value().is_string())
          throw Error(path + ": metadata '" + shorten_for_message(m.key(), 200) + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(path, key, value));
  }
  // The data section must be covered exactly: no overlap, no gap, nothing left over.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const auto& e : h.tensors) {
    std::string range = "[";  // (built in steps: GCC 12 warns falsely about "literal" + std::string&&)
    range += std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
    if (e.end > h.data_length)
      throw Error(tensor_where(path, e.name) + ": data_offsets " + range + " are beyond the data section (" +
                  std::to_string(h.data_length) + " bytes)");
    if (e.begin < covered)
      throw Error(tensor_where(path, e.name) + ": data_offsets " + range + " overlap tensor '" +
                  shorten_for_message(previous->name, 200) + "' (which ends at " + std::to_string(covered) + ")");
    if (e.begin > covered)
      throw Error(tensor_where(path, e.name) + ": data_offsets " + range + " leave a gap after byte " +
                  std::to_string(covered));
    covered = e.end;
    previous = &e;
  }
  if (covered != h.data_length)
    throw Error(path + ": the data section has " + std::to_string(h.data_length) + " bytes but tensors cover " +
                std::to_string(covered));
  return h;
}

SafetensorsHeaderInfo parse_safetensors_bytes(std::string_view file, const std::string& path) {
  unsigned char prefix[8] = {};
  for (size_t i = 0; i < 8 && i < file.size(); ++i) prefix[i] = static_cast<unsigned char>(file[i]);
  const uint64_t n = safetensors_header_length(prefix, file.size(), path);
  return parse_safetensors_header(file.substr(8, n), file.size() - 8 - n, path);
}

}  // namespace stratum::io
