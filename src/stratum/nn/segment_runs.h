#pragma once
// The runs of equal segment id along each packed row (its examples, then its
// padding), counted once on the host from the micro-batch's segment ids:
// what variable-length attention reads instead of a mask
// (nn/varlen_attention.h), for the row's length or, under sequence
// parallelism, that length padded on the right.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "stratum/nn/varlen_attention.h"

namespace stratum::nn {

class SegmentRuns {
 public:
  // segment_ids: int32 [B, T] on the CPU.
  explicit SegmentRuns(const at::Tensor& segment_ids);
  // False when some row holds a segment in two runs apart (a mask keeps them
  // one segment; runs cannot): then attention takes the mask.
  bool contiguous() const { return contiguous_; }
  int64_t length() const { return length_; }
  // The runs of rows padded to `length` (>= the rows' own) with padding, on
  // `device`; made once per length and device.
  const VarlenSequences& sequences(int64_t length, c10::Device device) const;

 private:
  int64_t rows_ = 0, length_ = 0;
  bool contiguous_ = true;
  std::vector<std::vector<int32_t>> runs_;  // per row, the runs' lengths in order
  std::vector<bool> ends_in_padding_;       // per row: its last run is padding (segment -1)
  mutable std::mutex mutex_;
  mutable std::map<std::pair<int64_t, std::string>, VarlenSequences> made_;
};

}  // namespace stratum::nn
