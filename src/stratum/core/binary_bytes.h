#pragma once
// A byte count in binary units ("512 B", "1.8 MiB", "14.80 GiB"), as the
// communication logs and the hang report print message sizes.
#include <cstdint>
#include <cstdio>
#include <string>

namespace stratum {

inline std::string binary_bytes_text(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (b < 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else if (b < 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace stratum
