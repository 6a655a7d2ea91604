#pragma once
// Which packed rows (packing.h) each data-parallel rank trains on: the
// windows of sampler.h's DistributedSampler, with rows in their place (it
// deals them). Each
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
  std::vector<int64_t> next(int64_t micro_batch) { return rows_.next(micro_batch); }
  SamplerState state() const { return rows_.state(); }
  // Takes the checkpoint's seed, epoch and position. Throws if the position
  // lies beyond an epoch.
  void load_state(const SamplerState& state);
  int64_t num_rows() const { return num_rows_; }
  int64_t rows_per_epoch() const { return rows_.samples_per_epoch(); }
  std::vector<int64_t> epoch_order(int64_t epoch) const { return rows_.epoch_order(epoch); }

 private:
  int64_t num_rows_;
  // The windows of a split of num_rows + 1 positions at seq_len 1: window k
  // starts at offset k, so its "offset" is row k.
  DistributedSampler rows_;
};

}  // namespace stratum::data
