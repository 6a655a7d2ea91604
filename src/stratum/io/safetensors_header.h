#pragma once
// The safetensors header (format in io/safetensors.h), read and checked
// without torch, so that the fuzz targets can link it: the 8-byte length, the
// JSON (nesting capped at kMaxJsonDepth), every entry's dtype, shape and
// offsets, and the data section covered exactly. io/safetensors.cpp reads the
// tensors on top of it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace stratum::io {

inline constexpr uint64_t kMaxSafetensorsHeaderLength = 100'000'000;  // the reference implementation's limit

// Bytes per element of a dtype name ("BF16" -> 2); 0 for a name the format lacks here.
size_t safetensors_element_size(std::string_view dtype);
// "F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL", for messages.
std::string safetensors_dtype_names();

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;  // as in the file: "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

struct SafetensorsHeaderInfo {
  uint64_t header_length = 0;  // N
  uint64_t data_length = 0;    // file size - 8 - N
  std::vector<SafetensorsTensorInfo> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

// N from the file's first 8 bytes (little-endian), checked against the
// format's limit and the file's size. Throws stratum::Error naming `path`.
uint64_t safetensors_header_length(const unsigned char prefix[8], uint64_t file_size, const std::string& path);

// Parses and checks the N bytes of header JSON, for a data section of
// `data_length` bytes. Every error names `path` and, where one is at fault, the tensor.
SafetensorsHeaderInfo parse_safetensors_header(std::string_view text, uint64_t data_length, const std::string& path);

// Both on a whole file in memory (tests, fuzzing).
SafetensorsHeaderInfo parse_safetensors_bytes(std::string_view file, const std::string& path);

}  // namespace stratum::io
