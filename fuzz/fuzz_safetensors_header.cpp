// The safetensors header reader: a whole file's bytes -> the checked header.
// When it is accepted, every tensor must lie inside the data section and
// agree with its dtype and shape (what the torch side then reads).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stratum/core/error.h"
#include "stratum/io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  try {
    const auto header = stratum::io::parse_safetensors_bytes(file, "fuzz.safetensors");
    if (8 + header.header_length + header.data_length != size) __builtin_trap();
    for (const auto& t : header.tensors) {
      uint64_t bytes = stratum::io::safetensors_element_size(t.dtype);
      for (int64_t d : t.shape) {
        if (d < 0) __builtin_trap();
        bytes *= static_cast<uint64_t>(d);
      }
      if (t.end > header.data_length || t.end - t.begin != bytes) __builtin_trap();
    }
  } catch (const stratum::Error&) {
  }
  return 0;
}
