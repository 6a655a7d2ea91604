#include "stratum/data/batch.h"

#include <ATen/ops/empty.h>

#include <cstring>

#include "stratum/core/error.h"

namespace stratum::data {

Batch make_batch(const TokenFile& file, const std::vector<int64_t>& offsets, int64_t seq_len) {
  if (seq_len < 1) throw Error(file.path() + ": sequence length must be at least 1, got " + std::to_string(seq_len));
  const auto rows = static_cast<int64_t>(offsets.size());
  const auto options = at::TensorOptions().dtype(at::kLong);
  Batch batch{at::empty({rows, seq_len}, options), at::empty({rows, seq_len}, options)};
  int64_t* tokens = batch.tokens.data_ptr<int64_t>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  std::vector<int64_t> window(static_cast<size_t>(seq_len + 1));
  const size_t row_bytes = static_cast<size_t>(seq_len) * sizeof(int64_t);
  for (int64_t r = 0; r < rows; ++r) {
    file.read(offsets[r], seq_len + 1, window.data());
    std::memcpy(tokens + r * seq_len, window.data(), row_bytes);
    std::memcpy(targets + r * seq_len, window.data() + 1, row_bytes);
  }
  return batch;
}

}  // namespace stratum::data
