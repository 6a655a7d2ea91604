#pragma once
// SplitMix64's finalizer: spreads nearby inputs (a seed and an epoch, a draw
// and a rank) over all 64 bits, so they give unrelated streams.
#include <cstdint>

namespace stratum {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace stratum
