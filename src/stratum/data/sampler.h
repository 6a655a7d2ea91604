#pragma once
// Which windows of the token stream each data-parallel rank trains on.
// Plain C++, no torch.
//
// Windows. A split [begin, end) is cut into W = (end - begin - 1) / seq_len
// windows; window k covers tokens [begin + k*seq_len, begin + k*seq_len +
// seq_len + 1): seq_len inputs plus the targets shifted by one. The stride is
// seq_len, so windows share one token: the target of a window's last input is
// the first input of the next. Every token but the split's last is an input
// exactly once per epoch, and no window reads outside its split.
//
// Order. Each epoch visits the windows in a permutation drawn from (seed,
// epoch) alone: Fisher-Yates over std::mt19937_64 (its output is fixed by the
// C++ standard) with our own unbiased bounded draw, so every standard library
// and machine gives the same order. shuffle = false keeps file order (eval).
//
// Ranks. The epoch's permutation is one global stream. A call to next(m) on
// every rank consumes the next m * dp_size windows of the stream: rank r takes
// stream items position + i*dp_size + r, i < m. An epoch ends when fewer than
// dp_size windows remain (at most dp_size - 1 dropped, so every rank gets the
// same count); a micro-batch that reaches the end continues into the next
// epoch.
//
// State. SamplerState counts windows consumed by all ranks together, so it is
// the same on every rank and does not depend on dp_size: a checkpoint taken at
// DP 4 resumes at DP 2 on the same permutation at the same global position.
// "Same" means: the windows consumed before the checkpoint are exactly the
// prefix the DP 4 run consumed, and the run goes on with the next windows of
// the same stream in order, now dealt to 2 ranks. With the same global batch
// (micro * grad-accumulation * dp), each optimizer step sees the same set of
// windows as the uninterrupted DP 4 run; only the tail dropped at an epoch's
// end (fewer than dp_size windows) can differ.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratum/data/split.h"

namespace stratum::data {

struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;  // windows consumed in this epoch, by all DP ranks together
  bool operator==(const SamplerState&) const = default;
};

// For checkpoints: {"seed": ..., "epoch": ..., "position": ...}. from_json
// throws stratum::Error on a missing or mistyped field.
void to_json(nlohmann::json& j, const SamplerState& state);
void from_json(const nlohmann::json& j, SamplerState& state);
std::string to_string(const SamplerState& state);  // "seed 1, epoch 2, position 640"

class DistributedSampler {
 public:
  // Throws stratum::Error if the split holds fewer windows than dp_size or the
  // arguments are out of range.
  DistributedSampler(Split split, int64_t seq_len, int dp_rank, int dp_size, uint64_t seed, bool shuffle = true);

  // Start offsets (token index of the first input) of this rank's next
  // micro-batch; advances the shared position by micro_batch * dp_size.
  std::vector<int64_t> next(int64_t micro_batch);

  SamplerState state() const { return state_; }
  // Takes seed, epoch and position from the checkpoint (its seed wins over the
  // constructor's). Throws if the position lies beyond this split's windows.
  void load_state(const SamplerState& state);

  int64_t num_windows() const { return num_windows_; }
  // Windows all ranks together consume in an epoch started at position 0.
  int64_t samples_per_epoch() const { return num_windows_ - num_windows_ % dp_size_; }
  int64_t samples_per_rank_per_epoch() const { return num_windows_ / dp_size_; }

  // Offsets of every window in an epoch's stream order (all ranks).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // This rank's offsets for a whole epoch from position 0, e.g. one pass over
  // the held-out split.
  std::vector<int64_t> rank_epoch_offsets(int64_t epoch) const;

 private:
  std::vector<int64_t> window_order(int64_t epoch) const;  // window indices in stream order
  const std::vector<int64_t>& order_for(int64_t epoch);    // the same, cached for next()

  Split split_;
  int64_t seq_len_;
  int dp_rank_, dp_size_;
  bool shuffle_;
  int64_t num_windows_;
  SamplerState state_;
  int64_t cached_epoch_ = -1;
  uint64_t cached_seed_ = 0;
  std::vector<int64_t> cached_order_;
};

// The permutation of 0..n-1 for (seed, epoch); exposed for tests.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace stratum::data
