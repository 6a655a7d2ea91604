#include "stratum/data/packed_sampler.h"

#include <numeric>

#include "stratum/core/error.h"

namespace stratum::data {

PackedRowSampler::PackedRowSampler(int64_t num_rows, int dp_rank, int dp_size, uint64_t seed, bool shuffle)
    : num_rows_(num_rows), dp_rank_(dp_rank), dp_size_(dp_size), shuffle_(shuffle) {
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size)
    throw Error("packed sampler: data-parallel rank " + std::to_string(dp_rank) + " of " + std::to_string(dp_size));
  if (num_rows < dp_size)
    throw Error("packed sampler: " + std::to_string(num_rows) + " packed rows cannot feed " + std::to_string(dp_size) +
                " data-parallel ranks (more instruction data, or a shorter seq_len)");
  state_.seed = seed;
}

std::vector<int64_t> PackedRowSampler::epoch_order(int64_t epoch) const {
  if (shuffle_) return shuffled_indices(num_rows_, state_.seed, epoch);
  std::vector<int64_t> order(static_cast<size_t>(num_rows_));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<int64_t> PackedRowSampler::next(int64_t micro_batch) {
  if (micro_batch < 1) throw Error("packed sampler: micro-batch " + std::to_string(micro_batch));
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(micro_batch));
  for (int64_t i = 0; i < micro_batch; ++i) {
    if (state_.position + dp_size_ > rows_per_epoch()) {  // fewer than dp_size rows left: next epoch
      ++state_.epoch;
      state_.position = 0;
    }
    if (cached_epoch_ != state_.epoch || cached_seed_ != state_.seed) {
      cached_order_ = epoch_order(state_.epoch);
      cached_epoch_ = state_.epoch;
      cached_seed_ = state_.seed;
    }
    out.push_back(cached_order_[static_cast<size_t>(state_.position + dp_rank_)]);
    state_.position += dp_size_;
  }
  return out;
}

void PackedRowSampler::load_state(const SamplerState& state) {
  if (state.position < 0 || state.epoch < 0 || state.position > num_rows_)
    throw Error("packed sampler: checkpoint position " + to_string(state) + " lies beyond the " +
                std::to_string(num_rows_) + " packed rows of an epoch (other data or seq_len?)");
  state_ = state;
}

}  // namespace stratum::data
