#include "stratum/data/sampler.h"

#include <random>
#include <utility>

#include "stratum/core/error.h"
#include "stratum/core/splitmix.h"

namespace stratum::data {

namespace {

// Nearby seeds and epochs give unrelated streams.
uint64_t mix(uint64_t x) { return splitmix64(x); }

// Uniform in [0, n), n >= 1, by rejection: values below 2^64 mod n would make
// the low residues more likely. Not std::uniform_int_distribution, whose
// algorithm differs between standard libraries.
uint64_t bounded_draw(std::mt19937_64& rng, uint64_t n) {
  const uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
  uint64_t x;
  do x = rng();
  while (x < reject_below);
  return x % n;
}

}  // namespace

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(mix(seed ^ mix(static_cast<uint64_t>(epoch))));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[bounded_draw(rng, static_cast<uint64_t>(i) + 1)]);
  return order;
}

DistributedSampler::DistributedSampler(Split split, int64_t seq_len, int dp_rank, int dp_size, uint64_t seed,
                                       bool shuffle)
    : split_(split), seq_len_(seq_len), dp_rank_(dp_rank), dp_size_(dp_size), shuffle_(shuffle) {
  if (seq_len < 1) throw Error("data sampler: seq_len must be at least 1, got " + std::to_string(seq_len));
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size)
    throw Error("data sampler: DP rank " + std::to_string(dp_rank) + " is not in [0, dp_size " +
                std::to_string(dp_size) + ")");
  if (split.begin < 0 || split.end < split.begin)
    throw Error("data sampler: bad split [" + std::to_string(split.begin) + ", " + std::to_string(split.end) + ")");
  num_windows_ = split.num_windows(seq_len);
  if (num_windows_ < dp_size)
    throw Error("data sampler: the split of " + std::to_string(split.size()) + " tokens holds " +
                std::to_string(num_windows_) + " windows of seq_len + 1 = " + std::to_string(seq_len + 1) +
                " tokens, fewer than the " + std::to_string(dp_size) + " data-parallel ranks (each needs one)");
  state_.seed = seed;
}

std::vector<int64_t> DistributedSampler::window_order(int64_t epoch) const {
  if (shuffle_) return shuffled_indices(num_windows_, state_.seed, epoch);
  std::vector<int64_t> order(static_cast<size_t>(num_windows_));
  for (int64_t i = 0; i < num_windows_; ++i) order[i] = i;
  return order;
}

const std::vector<int64_t>& DistributedSampler::order_for(int64_t epoch) {
  if (epoch != cached_epoch_ || state_.seed != cached_seed_ || cached_order_.empty()) {
    cached_order_ = window_order(epoch);
    cached_epoch_ = epoch;
    cached_seed_ = state_.seed;
  }
  return cached_order_;
}

std::vector<int64_t> DistributedSampler::next(int64_t micro_batch) {
  if (micro_batch < 1) throw Error("data sampler: micro-batch must be at least 1, got " + std::to_string(micro_batch));
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(micro_batch));
  for (int64_t i = 0; i < micro_batch; ++i) {
    if (state_.position + dp_size_ > num_windows_) {  // fewer windows left than ranks: next epoch
      ++state_.epoch;
      state_.position = 0;
    }
    const int64_t window = order_for(state_.epoch)[state_.position + dp_rank_];
    offsets.push_back(split_.begin + window * seq_len_);
    state_.position += dp_size_;
  }
  return offsets;
}

void DistributedSampler::load_state(const SamplerState& state) {
  if (state.epoch < 0 || state.position < 0 || state.position > num_windows_)
    throw Error("data sampler: cannot resume at " + to_string(state) + ": this split has " +
                std::to_string(num_windows_) + " windows (was the checkpoint made on other data or seq_len?)");
  state_ = state;
}

std::vector<int64_t> DistributedSampler::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order = window_order(epoch);
  for (auto& w : order) w = split_.begin + w * seq_len_;
  return order;
}

std::vector<int64_t> DistributedSampler::rank_epoch_offsets(int64_t epoch) const {
  const std::vector<int64_t> order = epoch_order(epoch);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(samples_per_rank_per_epoch()));
  for (int64_t p = 0; p + dp_size_ <= num_windows_; p += dp_size_) mine.push_back(order[p + dp_rank_]);
  return mine;
}

std::string to_string(const SamplerState& s) {
  return "seed " + std::to_string(s.seed) + ", epoch " + std::to_string(s.epoch) + ", position " +
         std::to_string(s.position);
}

}  // namespace stratum::data
