#include "stratum/zero/flat_layout.h"

#include "stratum/core/error.h"

namespace stratum::zero {

FlatLayout FlatLayout::build(const std::vector<ParamSpec>& params, int64_t bucket_elems, int dp_size) {
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
    if (!current.params.empty() && current.used + n > bucket_elems) close();
    if (current.params.empty()) {
      current.offset = l.total_;
      current.shard_offset = l.total_ / dp_size;
    }
    l.slots_[i] = ParamSlot{current.offset + current.used, n, static_cast<int>(l.buckets_.size())};
    current.params.push_back(i);
    current.used += n;
    l.param_numel_ += n;
  }
  close();
  return l;
}

}  // namespace stratum::zero
