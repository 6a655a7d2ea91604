#include "stratum/data/packed_sampler.h"

#include <string>

#include "stratum/core/error.h"

namespace stratum::data {
namespace {

int64_t checked_rows(int64_t num_rows, int dp_rank, int dp_size) {
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size)
    throw Error("packed sampler: data-parallel rank " + std::to_string(dp_rank) + " of " + std::to_string(dp_size));
  if (num_rows < dp_size)
    throw Error("packed sampler: " + std::to_string(num_rows) + " packed rows cannot feed " + std::to_string(dp_size) +
                " data-parallel ranks (more instruction data, or a shorter seq_len)");
  return num_rows;
}

}  // namespace

PackedRowSampler::PackedRowSampler(int64_t num_rows, int dp_rank, int dp_size, uint64_t seed, bool shuffle)
    : num_rows_(checked_rows(num_rows, dp_rank, dp_size)),
      rows_(Split{0, num_rows + 1}, /*seq_len=*/1, dp_rank, dp_size, seed, shuffle) {}

void PackedRowSampler::load_state(const SamplerState& state) {
  if (state.position < 0 || state.epoch < 0 || state.position > num_rows_)
    throw Error("packed sampler: checkpoint position " + to_string(state) + " lies beyond the " +
                std::to_string(num_rows_) + " packed rows of an epoch (other data or seq_len?)");
  rows_.load_state(state);
}

}  // namespace stratum::data
