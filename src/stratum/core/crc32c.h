#pragma once
// CRC-32C (Castagnoli), the checksum of iSCSI, ext4 and RocksDB: checkpoints
// store one per tensor and verify it on load. SSE4.2's crc32 instruction where
// the CPU has it (several GB/s), a table otherwise.
#include <cstddef>
#include <cstdint>
#include <string>

namespace stratum {

// The CRC of `size` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The CRC of A followed by B from crc(A), crc(B) and B's length (zlib's
// method): pieces checksummed in parallel fold into the whole's CRC.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

// As stored in manifests: 8 lowercase hex digits.
std::string crc32c_hex(uint32_t crc);

}  // namespace stratum
