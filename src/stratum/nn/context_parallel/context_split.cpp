#include "stratum/nn/context_parallel/context_split.h"

#include "stratum/core/error.h"

namespace stratum::nn::cp {

std::string split_problem(int64_t length, const ContextSplit& s) {
  const std::string n = std::to_string(length);
  if (s.size < 1 || s.ulysses < 1 || s.size % s.ulysses != 0)
    return "context parallelism over " + std::to_string(s.size) + " ranks with Ulysses over " +
           std::to_string(s.ulysses) + ": the Ulysses size must divide the group";
  const int64_t r = s.ring();
  if (r == 1) {
    if (length % s.ulysses != 0)
      return "a sequence of " + n + " tokens does not split over " + std::to_string(s.ulysses) +
             " context-parallel ranks (Ulysses): use a length that is a multiple of " + std::to_string(s.ulysses);
    return "";
  }
  const int64_t unit = 2 * r * s.ulysses;
  if (length % unit != 0)
    return "a sequence of " + n + " tokens does not split over " + std::to_string(s.size) +
           " context-parallel ranks: the ring's zigzag cuts it into 2 x " + std::to_string(r) + " chunks" +
           (s.ulysses > 1 ? " and each ring rank's pair over " + std::to_string(s.ulysses) + " Ulysses ranks" : "") +
           "; use a length that is a multiple of " + std::to_string(unit);
  return "";
}

std::vector<int64_t> ring_positions(int64_t length, const ContextSplit& s, int64_t ring_rank) {
  const int64_t r = s.ring();
  const int64_t chunk = length / (2 * r);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(2 * chunk));
  for (const int64_t c : {ring_rank, 2 * r - 1 - ring_rank})
    for (int64_t p = c * chunk; p < (c + 1) * chunk; ++p) out.push_back(p);
  return out;
}

std::vector<int64_t> rank_positions(int64_t length, const ContextSplit& s, int64_t rank) {
  if (!split_problem(length, s).empty()) throw Error(split_problem(length, s));
  const std::vector<int64_t> ring = ring_positions(length, s, rank / s.ulysses);
  const int64_t part = static_cast<int64_t>(ring.size()) / s.ulysses, j = rank % s.ulysses;
  return {ring.begin() + j * part, ring.begin() + (j + 1) * part};
}

}  // namespace stratum::nn::cp
