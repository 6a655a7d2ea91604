#pragma once
// How tensor parallelism pads a vocabulary: to a multiple of 64 x size rows,
// so every rank's shard is an aligned GEMM shape (Megatron's
// make-vocab-size-divisible-by). Torch-free: the layers, the models' parameter
// counts and the memory estimator all use this one rule.
#include <cstdint>
#include <string>

#include "stratum/core/error.h"

namespace stratum::nn::tp {

// `vocab` itself over one rank.
inline int64_t padded_vocab_size(int64_t vocab, int64_t size) {
  if (vocab < 1 || size < 1)
    throw Error("tensor parallel: a vocabulary of " + std::to_string(vocab) + " over " + std::to_string(size) +
                " ranks");
  if (size == 1) return vocab;
  const int64_t multiple = 64 * size;
  return (vocab + multiple - 1) / multiple * multiple;
}

// The rows of the padded vocabulary one rank of `size` holds.
inline int64_t vocab_rows_per_rank(int64_t vocab, int64_t size) { return padded_vocab_size(vocab, size) / size; }

}  // namespace stratum::nn::tp
