#pragma once
// A process-wide map from a parameter (by identity: its TensorImpl) to the one
// sink that takes its gradient, read from autograd's threads. Shared by
// nn/linear.cpp (WeightGradSink) and nn/embedding.cpp (RowGradientSink).
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <ATen/core/Tensor.h>

#include "stratum/core/error.h"

namespace stratum::nn {

// Entry: what is kept for a parameter; its `sink` member is the owner, its
// static `kWhat` names the sink kind in errors ("linear: a weight-gradient sink").
template <class Entry>
class ParamRegistry {
 public:
  // The process's one registry of `Entry`s.
  static ParamRegistry& instance() {
    static ParamRegistry r;
    return r;
  }

  // Registers `entry` for `weight`. Again by the same sink: nothing changes;
  // by another sink: throws.
  void add(const at::Tensor& weight, const Entry& entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, added] = entries_.emplace(weight.unsafeGetTensorImpl(), entry);
    if (!added && it->second.sink != entry.sink)
      throw Error(std::string(Entry::kWhat) + " is already registered for this weight (two engines on one model?)");
  }
  // Unregisters `weight` if `sink` holds it.
  void remove(const at::Tensor& weight, const void* sink) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(weight.unsafeGetTensorImpl());
    if (it != entries_.end() && it->second.sink == sink) entries_.erase(it);
  }
  std::optional<Entry> find(const at::Tensor& weight) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(weight.unsafeGetTensorImpl());
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

 private:
  ParamRegistry() = default;

  mutable std::mutex mutex_;
  std::unordered_map<const void*, Entry> entries_;
};

}  // namespace stratum::nn
