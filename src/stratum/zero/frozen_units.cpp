#include "stratum/zero/frozen_units.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>

#include <algorithm>

#include "stratum/core/error.h"

namespace stratum::zero {
namespace {

constexpr int64_t kAlign = 16;  // every tensor's bytes start here: any dtype's view of them is aligned

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// A tensor's bytes, flat, on `device`.
at::Tensor bytes_of(const at::Tensor& t, c10::Device device) {
  return t.detach().to(device).contiguous().reshape({-1}).view(at::kByte);
}

}  // namespace

FrozenUnits::FrozenUnits(std::vector<std::vector<FrozenTensors>> layers, std::shared_ptr<distributed::Communicator> dp,
                         c10::Device device, int64_t prefetch_bytes)
    : dp_(std::move(dp)), device_(device), prefetch_bytes_(prefetch_bytes) {
  units_.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    units_[l].weights = std::move(layers[l]);
    for (const FrozenTensors& w : units_[l].weights) layer_of_name_.emplace(w.name, static_cast<int>(l));
    if (!units_[l].weights.empty()) last_holding_ = static_cast<int>(l);
  }
}

FrozenUnits::~FrozenUnits() {
  for (Unit& u : units_)  // a buffer is the collective's until its gather completes
    if (u.gather) u.gather->wait();
}

std::vector<at::Tensor> FrozenUnits::tensors_of(size_t layer, size_t weight) const {
  return units_[layer].weights[weight].tensors();
}

void FrozenUnits::lay_out(size_t layer) {
  Unit& u = units_[layer];
  u.slots.clear();
  int64_t offset = 0;
  for (size_t w = 0; w < u.weights.size(); ++w) {
    const std::vector<at::Tensor> ts = tensors_of(layer, w);
    for (size_t k = 0; k < ts.size(); ++k) {
      const at::Tensor& t = ts[k];
      if (!t.defined()) throw Error("ZeRO-3: frozen weight '" + u.weights[w].name + "' has no value to partition");
      const int64_t nbytes = t.numel() * static_cast<int64_t>(t.element_size());
      u.slots.push_back(Slot{w, k, offset, nbytes, t.scalar_type(), t.sizes().vec()});
      offset = round_up(offset + nbytes, kAlign);
    }
  }
  u.padded = round_up(offset, kAlign * dp_->size());
}

void FrozenUnits::partition(size_t layer) {
  if (!holds(layer)) return;
  c10::AutoGradMode no_grad(false);
  Unit& u = units_[layer];
  if (u.gather) u.gather->wait();
  u.gather.reset();
  if (u.state != State::released) live_ -= u.padded;  // opened for loading
  lay_out(layer);
  const int64_t slice = u.padded / dp_->size();
  const int64_t lo = dp_->rank() * slice, hi = lo + slice;
  u.shard = at::zeros({slice}, at::TensorOptions().dtype(at::kByte).device(device_));
  std::vector<std::vector<at::Tensor>> tensors(u.weights.size());
  for (size_t w = 0; w < u.weights.size(); ++w) tensors[w] = tensors_of(layer, w);
  for (const Slot& s : u.slots) {
    const int64_t from = std::max(lo, s.offset), to = std::min(hi, s.offset + s.nbytes);
    if (from >= to) continue;
    const at::Tensor bytes = bytes_of(tensors[s.weight][s.tensor], device_);
    u.shard.narrow(0, from - lo, to - from).copy_(bytes.narrow(0, from - s.offset, to - from));
  }
  for (const Slot& s : u.slots) {
    const at::Tensor& t = tensors[s.weight][s.tensor];
    t.set_data(at::empty({0}, t.options().device(device_)));
  }
  u.full = at::Tensor();
  u.state = State::released;
  u.partitioned = true;
}

void FrozenUnits::open(size_t layer) {
  if (!holds(layer)) return;
  Unit& u = units_[layer];
  if (!u.partitioned) return;  // still whole
  if (u.state == State::gathered) return;
  if (u.gather) u.gather->wait();
  u.gather.reset();
  if (u.state == State::released) live_ += u.padded;
  u.full = at::empty({u.padded}, at::TensorOptions().dtype(at::kByte).device(device_));
  u.state = State::gathered;
  bind(layer);
}

int FrozenUnits::layer_of(const std::string& name) const {
  const auto it = layer_of_name_.find(name);
  return it == layer_of_name_.end() ? -1 : it->second;
}

void FrozenUnits::launch(size_t layer) {
  Unit& u = units_[layer];
  c10::AutoGradMode no_grad(false);
  u.full = at::empty({u.padded}, at::TensorOptions().dtype(at::kByte).device(device_));
  u.gather = dp_->all_gather(u.full, u.shard);
  u.state = State::in_flight;
  live_ += u.padded;
  peak_live_ = std::max(peak_live_, live_);
}

void FrozenUnits::ensure_gathered(size_t layer) {
  Unit& u = units_[layer];
  if (!u.partitioned || u.state == State::gathered) return;
  if (u.state == State::released) launch(layer);
  u.gather->wait();
  u.gather.reset();
  u.state = State::gathered;
  bind(layer);
}

void FrozenUnits::bind(size_t layer) {
  Unit& u = units_[layer];
  c10::AutoGradMode no_grad(false);
  std::vector<std::vector<at::Tensor>> tensors(u.weights.size());
  for (size_t w = 0; w < u.weights.size(); ++w) tensors[w] = tensors_of(layer, w);
  for (const Slot& s : u.slots) {
    if (s.tensor >= tensors[s.weight].size())
      throw Error("ZeRO-3: frozen weight '" + u.weights[s.weight].name + "' is held in " +
                  std::to_string(tensors[s.weight].size()) + " tensors now, not the ones it was partitioned as");
    tensors[s.weight][s.tensor].set_data(u.full.narrow(0, s.offset, s.nbytes).view(s.dtype).view(s.shape));
  }
}

void FrozenUnits::release(size_t layer) {
  Unit& u = units_[layer];
  if (!u.partitioned || u.state == State::released) return;
  if (u.gather) u.gather->wait();
  u.gather.reset();
  c10::AutoGradMode no_grad(false);
  for (size_t w = 0; w < u.weights.size(); ++w)
    for (const at::Tensor& t : tensors_of(layer, w)) t.set_data(at::empty({0}, t.options()));
  u.full = at::Tensor();
  u.state = State::released;
  live_ -= u.padded;
}

void FrozenUnits::before_forward(size_t layer) {
  if (layer >= units_.size()) return;
  if (holds(layer)) ensure_gathered(layer);
  int64_t budget = prefetch_bytes_;
  for (size_t k = layer + 1; k < units_.size() && budget > 0; ++k) {
    if (!holds(k) || !units_[k].partitioned) continue;
    budget -= units_[k].padded;
    if (units_[k].state == State::released) launch(k);
  }
}

void FrozenUnits::after_forward(size_t layer, bool backward_reads) {
  if (!holds(layer)) return;
  units_[layer].backward_reads = backward_reads;
  const bool later = static_cast<int>(layer) < last_holding_;  // a later layer gathers before this one's backward
  if (!backward_reads || later) release(layer);
}

void FrozenUnits::before_backward(size_t layer) {
  if (!holds(layer) || !units_[layer].backward_reads) return;
  ensure_gathered(layer);
  int64_t budget = prefetch_bytes_;
  for (size_t k = layer; k-- > 0 && budget > 0;) {
    if (!holds(k) || !units_[k].partitioned || !units_[k].backward_reads) continue;
    budget -= units_[k].padded;
    if (units_[k].state == State::released) launch(k);
  }
}

void FrozenUnits::after_backward(size_t layer) {
  if (holds(layer)) release(layer);
}

void FrozenUnits::release_all() {
  for (size_t l = 0; l < units_.size(); ++l) release(l);
}

int64_t FrozenUnits::held_bytes() const {
  int64_t n = 0;
  for (const Unit& u : units_) n += u.shard.defined() ? u.shard.numel() : 0;
  return n;
}

int64_t FrozenUnits::whole_bytes() const {
  int64_t n = 0;
  for (const Unit& u : units_)
    for (const Slot& s : u.slots) n += s.nbytes;
  return n;
}

}  // namespace stratum::zero
