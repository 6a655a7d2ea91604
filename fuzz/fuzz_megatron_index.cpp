// A Megatron .idx: the first 8 bytes are the .bin's size (little-endian), the
// rest the index -> the checked index, then every sequence it lists walked
// and its tokens read from a .bin of that size (ASan sees a read past it).
// A .bin over 1 MiB is not allocated: its sequences' bounds are checked
// against the size instead.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "stratum/core/error.h"
#include "stratum/data/foreign_token_headers.h"

namespace {
constexpr uint64_t kMaxFakeBin = uint64_t{1} << 20;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stratum::data;
  if (size < 8) return 0;
  uint64_t bin_size = 0;
  std::memcpy(&bin_size, data, 8);
  const uint8_t* idx = data + 8;
  const size_t idx_size = size - 8;
  try {
    const MegatronIndexInfo info = check_megatron_index(idx, idx_size, bin_size, "fuzz.idx", "fuzz.bin");
    const bool readable = bin_size <= kMaxFakeBin;
    // Exactly the .bin's size: ASan's redzone sits right after its last byte.
    std::vector<uint8_t> bin(readable ? bin_size : 0, 7);
    const uint64_t width = static_cast<uint64_t>(info.width);
    uint64_t sum = 0, end = 0;
    for (uint64_t s = 0; s < info.sequences; ++s) {
      const int64_t pointer = megatron_sequence_pointer(idx, info, s);
      const int32_t tokens = megatron_sequence_size(idx, info, s);
      if (pointer < 0 || tokens < 0 || static_cast<uint64_t>(pointer) != end) __builtin_trap();
      end = static_cast<uint64_t>(pointer) + static_cast<uint64_t>(tokens) * width;
      if (end > bin_size) __builtin_trap();
      if (!readable) continue;
      for (uint64_t at = static_cast<uint64_t>(pointer); at < end; at += width)
        sum += static_cast<uint64_t>(megatron_token(bin.data(), info, at));
    }
    if (end != info.token_bytes || info.token_bytes != bin_size) __builtin_trap();
    if (sum == 1) return 0;  // keeps the loop from being optimized away
  } catch (const stratum::Error&) {
  }
  return 0;
}
