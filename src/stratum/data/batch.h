#pragma once
// A micro-batch as tensors: the only part of data/ that needs ATen.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "stratum/data/token_file.h"

namespace stratum::data {

// tokens[i] = file[offsets[i], offsets[i] + seq_len), targets[i] the same
// window shifted by one token. int64, shape [offsets.size(), seq_len],
// contiguous, on the CPU (move with .to(device)).
struct Batch {
  at::Tensor tokens, targets;
};

// Throws stratum::Error naming the file if a window runs past its end.
Batch make_batch(const TokenFile& file, const std::vector<int64_t>& offsets, int64_t seq_len);

}  // namespace stratum::data
