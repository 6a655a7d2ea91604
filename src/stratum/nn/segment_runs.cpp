#include "stratum/nn/segment_runs.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <set>

#include "stratum/core/error.h"

namespace stratum::nn {

SegmentRuns::SegmentRuns(const at::Tensor& segment_ids) {
  if (!segment_ids.device().is_cpu() || segment_ids.scalar_type() != at::kInt || segment_ids.dim() != 2)
    throw Error("segment runs: segment ids must be int32 [batch, sequence] on the CPU");
  const at::Tensor ids = segment_ids.contiguous();
  rows_ = ids.size(0);
  length_ = ids.size(1);
  const int32_t* p = ids.data_ptr<int32_t>();
  for (int64_t r = 0; r < rows_; ++r) {
    std::vector<int32_t> runs;
    std::set<int32_t> seen;
    const int32_t* row = p + r * length_;
    for (int64_t t = 0; t < length_; ++t) {
      if (t > 0 && row[t] == row[t - 1]) {
        ++runs.back();
        continue;
      }
      if (!seen.insert(row[t]).second) contiguous_ = false;
      runs.push_back(1);
    }
    ends_in_padding_.push_back(length_ > 0 && row[length_ - 1] == -1);
    runs_.push_back(std::move(runs));
  }
}

const VarlenSequences& SegmentRuns::sequences(int64_t length, c10::Device device) const {
  if (length < length_)
    throw Error("segment runs: rows of " + std::to_string(length_) + " cannot be cut to " + std::to_string(length));
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(length, device.str());
  if (auto it = made_.find(key); it != made_.end()) return it->second;
  std::vector<int32_t> offsets = {0};
  int64_t longest = 0;
  for (int64_t r = 0; r < rows_; ++r) {
    std::vector<int32_t> runs = runs_[static_cast<size_t>(r)];
    // Padding on the right joins the row's padding, or is a run of its own.
    if (const int64_t pad = length - length_; pad > 0) {
      if (ends_in_padding_[static_cast<size_t>(r)]) runs.back() += static_cast<int32_t>(pad);
      else runs.push_back(static_cast<int32_t>(pad));
    }
    for (int32_t n : runs) {
      offsets.push_back(offsets.back() + n);
      longest = std::max<int64_t>(longest, n);
    }
  }
  VarlenSequences s;
  s.cu_seqlens = at::tensor(offsets, at::kInt).to(device);
  s.max_length = longest;
  return made_.emplace(key, std::move(s)).first->second;
}

}  // namespace stratum::nn
