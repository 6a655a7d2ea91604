#include "stratum/io/tensor_checksum.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <vector>

#include "stratum/core/crc32c.h"

namespace stratum::io {

uint32_t tensor_crc32c(const at::Tensor& tensor) {
  const at::Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
  const auto* data = static_cast<const unsigned char*>(t.data_ptr());
  const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
  constexpr uint64_t kChunk = 8u << 20;  // 8 MiB: enough work per thread, few combines
  if (bytes <= 2 * kChunk) return crc32c(data, bytes);
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  std::vector<uint32_t> crcs(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const uint64_t offset = static_cast<uint64_t>(c) * kChunk;
      crcs[static_cast<size_t>(c)] = crc32c(data + offset, std::min(kChunk, bytes - offset));
    }
  });
  uint32_t crc = crcs[0];
  for (int64_t c = 1; c < chunks; ++c) {
    const uint64_t offset = static_cast<uint64_t>(c) * kChunk;
    crc = crc32c_combine(crc, crcs[static_cast<size_t>(c)], std::min(kChunk, bytes - offset));
  }
  return crc;
}

}  // namespace stratum::io
