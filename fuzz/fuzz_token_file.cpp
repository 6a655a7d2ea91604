// The token-file reader: a file's bytes -> the checked header, then every
// token read the way TokenFile does (ASan sees a read past the bytes).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "stratum/core/error.h"
#include "stratum/data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto info = stratum::data::check_token_file(data, size, "fuzz.strtok");
    const uint8_t* tokens = data + stratum::data::kTokenFileHeaderBytes;
    uint64_t sum = 0;
    for (int64_t i = 0; i < info.count; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, tokens + i * info.dtype_bytes, static_cast<size_t>(info.dtype_bytes));
      sum += v;
    }
    if (sum == 1) return 0;  // keeps the loop from being optimized away
  } catch (const stratum::Error&) {
  }
  return 0;
}
