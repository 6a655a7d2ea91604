#pragma once
// The safetensors format (Hugging Face), read and written without Python:
//   8 bytes   N, little-endian u64: the header's length
//   N bytes   JSON: {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//                    "__metadata__": {"key": "value", ...}}  (padded with spaces)
//   the rest  raw little-endian tensor data; offsets count from its start
// dtypes: F64, F32, F16, BF16, I64, I32, U8, BOOL.
//
// Reading validates the whole header before any data (the checks of the
// reference implementation, in the torch-free io/safetensors_header.h):
// not a regular file, truncated file, header length beyond the file or over
// 100 MB, bad JSON or nested deeper than 64 levels, unknown dtype, shape and
// byte size disagreeing, offsets out of range, overlapping or leaving gaps.
// Every error names the file and, where one is at fault, the tensor.
// Writing goes to a temporary name in the same directory, renamed into place
// when complete; data are ordered by element size so every tensor stays aligned.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace stratum::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // as in the file: "BF16", ...
  at::ScalarType scalar_type;  // the torch dtype it reads as
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

struct SafetensorsHeader {
  std::string path;
  uint64_t header_length = 0;  // N
  uint64_t data_length = 0;    // file size - 8 - N
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

SafetensorsHeader read_safetensors_header(const std::string& path);

// All tensors (CPU, in their file dtype).
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);
// Only `names`; throws naming any name the file lacks.
std::map<std::string, at::Tensor> read_safetensors(const std::string& path, const std::set<std::string>& names);
// All tensors over a read-only memory map of the file (the same header
// checks): nothing is read until a tensor's bytes are touched, and ranks on
// one node share the page cache. The tensors must not be written; the map
// lives while any of them does.
std::map<std::string, at::Tensor> map_safetensors(const std::string& path);

// Writes `tensors` (any device, any of the dtypes above; made contiguous on the
// CPU one at a time). Names must be unique and must not be "__metadata__".
// metadata gets "format": "pt" unless given (transformers requires it).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// "BF16" for at::kBFloat16, ...; throws for dtypes the format lacks here.
std::string safetensors_dtype(at::ScalarType type);

}  // namespace stratum::io
