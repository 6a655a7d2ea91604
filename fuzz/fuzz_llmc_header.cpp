// An llm.c shard: the bytes are the file -> the checked header, then every
// token read the way the conversion reads it (ASan sees a read past the bytes).
#include <cstddef>
#include <cstdint>

#include "stratum/core/error.h"
#include "stratum/data/foreign_token_headers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto info = stratum::data::check_llmc_shard(data, size, "fuzz_shard.bin");
    uint64_t sum = 0;
    for (int64_t i = 0; i < info.count; ++i) sum += static_cast<uint64_t>(stratum::data::llmc_token(data, info, i));
    if (sum == 1) return 0;  // keeps the loop from being optimized away
  } catch (const stratum::Error&) {
  }
  return 0;
}
