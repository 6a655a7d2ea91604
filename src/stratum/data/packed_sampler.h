#pragma once
// Which packed rows (packing.h) each data-parallel rank trains on: the
// windows of sampler.h's DistributedSampler, with rows in their place. Each
// epoch is a permutation of the rows drawn from (seed, epoch) alone
// (shuffled_indices: the same on every machine and standard library), or
// file order without shuffle. A call to next(m) on every rank consumes the
// next m * dp_size rows of the epoch's stream: rank r takes items position +
// i*dp_size + r, i < m. An epoch ends when fewer than dp_size rows remain.
// The state (seed, epoch, rows consumed by all ranks) is the one SamplerState
// of checkpoints, the same on every rank, so a run resumes at another
// data-parallel size on the same stream. Plain C++, no torch.
#include <cstdint>
#include <vector>

#include "stratum/data/sampler.h"

namespace stratum::data {

class PackedRowSampler {
 public:
  // Throws stratum::Error when there are fewer rows than dp_size or the
  // arguments are out of range.
  PackedRowSampler(int64_t num_rows, int dp_rank, int dp_size, uint64_t seed, bool shuffle = true);

  // This rank's next rows; advances the shared position by micro_batch * dp_size.
  std::vector<int64_t> next(int64_t micro_batch);

  SamplerState state() const { return state_; }
  // Takes the checkpoint's seed, epoch and position. Throws if the position
  // lies beyond an epoch.
  void load_state(const SamplerState& state);

  int64_t num_rows() const { return num_rows_; }
  int64_t rows_per_epoch() const { return num_rows_ - num_rows_ % dp_size_; }
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  int64_t num_rows_;
  int dp_rank_, dp_size_;
  bool shuffle_;
  SamplerState state_;
  int64_t cached_epoch_ = -1;
  uint64_t cached_seed_ = 0;
  std::vector<int64_t> cached_order_;
};

}  // namespace stratum::data
