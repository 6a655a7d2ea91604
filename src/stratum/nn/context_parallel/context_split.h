#pragma once
// Which tokens of a sequence each context-parallel rank holds. Plain C++.
//
// A group of `size` ranks is `ring` = size / `ulysses` ring ranks, each a
// Ulysses group of `ulysses` consecutive ranks (rank = ring_rank * ulysses +
// ulysses_rank). The sequence of `length` is cut into 2 * ring equal chunks;
// ring rank i holds chunks i and 2 * ring - 1 - i (the zigzag split: under a
// causal mask every ring rank then has the same work), and its Ulysses ranks
// hold consecutive equal parts of those two chunks in order. With one ring
// rank that is the whole sequence cut into `ulysses` consecutive parts.
#include <cstdint>
#include <string>
#include <vector>

namespace stratum::nn::cp {

struct ContextSplit {
  int64_t size = 1;     // the context-parallel group
  int64_t ulysses = 1;  // ranks that exchange heads (divides size)
  int64_t ring() const { return size / ulysses; }
};

// "" when `length` splits so, else why not, with the numbers and what would.
std::string split_problem(int64_t length, const ContextSplit& split);

// The positions (0 .. length - 1) the ring rank's Ulysses group holds
// together, in the order they gather them: chunk i, then chunk 2 * ring - 1 - i.
std::vector<int64_t> ring_positions(int64_t length, const ContextSplit& split, int64_t ring_rank);

// The positions context-parallel rank `rank` holds, in order.
std::vector<int64_t> rank_positions(int64_t length, const ContextSplit& split, int64_t rank);

}  // namespace stratum::nn::cp
