#include "stratum/zero/flat_layout.h"

#include <algorithm>

#include "stratum/core/error.h"

namespace stratum::zero {

FlatLayout FlatLayout::build(const std::vector<ParamSpec>& params, int64_t bucket_elems, int dp_size,
                             const std::vector<int>& alone) {
  if (params.empty()) throw Error("ZeRO: the model has no trainable parameters (none with requires_grad)");
  if (dp_size < 1) throw Error("ZeRO: data-parallel size must be >= 1");
  if (bucket_elems < 1) throw Error("ZeRO: bucket size must be >= 1 element");
  FlatLayout l;
  l.dp_ = dp_size;
  l.specs_ = params;
  l.slots_.resize(params.size());
  BucketSpan current;
  auto close = [&]() {
    if (current.params.empty()) return;
    current.numel = (current.used + dp_size - 1) / dp_size * dp_size;
    l.buckets_.push_back(current);
    l.total_ += current.numel;
    current = BucketSpan{};
  };
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const int64_t n = params[i].numel;
    const bool own_bucket = std::find(alone.begin(), alone.end(), i) != alone.end();
    if (!current.params.empty() && (own_bucket || current.used + n > bucket_elems)) close();
    if (current.params.empty()) {
      current.offset = l.total_;
      current.shard_offset = l.total_ / dp_size;
    }
    l.slots_[i] = ParamSlot{current.offset + current.used, n, static_cast<int>(l.buckets_.size())};
    current.params.push_back(i);
    current.used += n;
    l.param_numel_ += n;
    if (own_bucket) close();
  }
  close();
  return l;
}

std::vector<FlatPiece> FlatLayout::rank_pieces(int rank, bool segment_per_bucket) const {
  std::vector<FlatPiece> pieces;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketSpan& s = buckets_[b];
    pieces.push_back(segment_per_bucket
                         ? FlatPiece{slice_offset(static_cast<int>(b), rank), s.slice_numel(dp_), static_cast<int>(b), 0}
                         : FlatPiece{slice_offset(static_cast<int>(b), rank), s.slice_numel(dp_), 0, s.shard_offset});
  }
  return pieces;
}

FlatLayout FlatLayout::build_groups(const std::vector<ParamSpec>& params, const std::vector<std::vector<int>>& groups,
                                    int dp_size) {
  if (params.empty()) throw Error("ZeRO: the model has no trainable parameters (none with requires_grad)");
  if (dp_size < 1) throw Error("ZeRO: data-parallel size must be >= 1");
  FlatLayout l;
  l.dp_ = dp_size;
  l.specs_ = params;
  l.slots_.resize(params.size());
  std::vector<int> seen(params.size(), 0);
  for (const auto& group : groups) {
    if (group.empty()) continue;
    BucketSpan b;
    b.offset = l.total_;
    b.shard_offset = l.total_ / dp_size;
    for (int i : group) {
      if (i < 0 || i >= static_cast<int>(params.size())) throw Error("ZeRO: parameter index out of range in a group");
      if (seen[i]++) throw Error("ZeRO: parameter '" + params[i].name + "' is in two groups");
      l.slots_[i] = ParamSlot{b.offset + b.used, params[i].numel, static_cast<int>(l.buckets_.size())};
      b.params.push_back(i);
      b.used += params[i].numel;
      l.param_numel_ += params[i].numel;
    }
    b.numel = (b.used + dp_size - 1) / dp_size * dp_size;
    l.total_ += b.numel;
    l.buckets_.push_back(std::move(b));
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (!seen[i]) throw Error("ZeRO: parameter '" + params[i].name + "' is in no group");
  return l;
}

}  // namespace stratum::zero
