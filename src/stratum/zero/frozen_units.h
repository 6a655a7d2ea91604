#pragma once
// ZeRO-3 over a frozen base (LoRA, QLoRA). Each layer's frozen weights, a
// bf16 base's dense tensors or an NF4 base's codes and scales, are one unit of
// bytes partitioned over the data-parallel group: a rank holds 1/N of the
// base, and a layer is all-gathered as bytes around its forward and, when its
// backward reads the weights (a recomputed layer, or the input's gradient),
// before its backward. An NF4 base travels in its 4 bits (a quarter of bf16's
// traffic). Nothing here trains: no gradient, no optimizer state. (Inside a
// layer, activations downstream of an adapter need the base for their
// gradient even when the layer's input takes none: any layer whose output
// takes a gradient is gathered for its backward.)
//
// A unit is bound the way ZeRO-3 binds parameters (set_data: the tensors keep
// their identity, so what autograd or a layer saved sees the gathered values)
// and released to empty tensors. The layout of a layer's bytes is taken from
// its tensors whenever it is partitioned, so loading may replace an NF4
// weight (another double quantization) between open() and partition().
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"

namespace stratum::zero {

// One frozen weight of a layer.
struct FrozenTensors {
  std::string name;  // the parameter it is (errors, loading)
  // The tensors holding its bytes now: a dense weight, itself; an NF4 weight,
  // its codes, block scales and nested scales (not the shared code book).
  // Read again at every use. No two weights may share a tensor.
  std::function<std::vector<at::Tensor>()> tensors;
};

class FrozenUnits {
 public:
  // `layers[l]`: layer l's frozen weights (none: nothing to gather for it),
  // whole on this rank until partition(l). `prefetch_bytes`: how much the
  // gathers ahead of the running layer may hold.
  FrozenUnits(std::vector<std::vector<FrozenTensors>> layers, std::shared_ptr<distributed::Communicator> dp,
              c10::Device device, int64_t prefetch_bytes);
  ~FrozenUnits();
  FrozenUnits(const FrozenUnits&) = delete;
  FrozenUnits& operator=(const FrozenUnits&) = delete;

  // Layer l's weights are whole here, the same on every rank (drawn by name,
  // or read from one file): keeps this rank's bytes, releases the rest.
  void partition(size_t layer);
  // Layer l's weights whole again but unset, for a loader that writes every
  // one of them; partition(l) after. No collective.
  void open(size_t layer);
  // The layer holding frozen weight `name`, or -1.
  int layer_of(const std::string& name) const;
  bool holds(size_t layer) const { return layer < units_.size() && !units_[layer].weights.empty(); }

  // Around a layer's forward: gathered (the next layer's gather started);
  // after it, released unless `backward_reads` (a backward runs through its
  // output) and no later layer gathers (its backward comes next).
  void before_forward(size_t layer);
  void after_forward(size_t layer, bool backward_reads);
  // Before a layer's backward: gathered again when its forward said a
  // backward reads the weights (the layer before it prefetched).
  void before_backward(size_t layer);
  // The layer's backward is done (its input's gradient is complete).
  void after_backward(size_t layer);
  // After each backward pass, and before anything reads the weights outside a forward.
  void release_all();

  int64_t held_bytes() const;   // this rank's shards
  int64_t whole_bytes() const;  // every layer's unit, whole
  int64_t peak_live_bytes() const { return peak_live_; }  // gathered at once, at most

 private:
  enum class State { released, in_flight, gathered };
  struct Slot {  // one tensor's bytes in its unit
    size_t weight, tensor;
    int64_t offset, nbytes;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  struct Unit {
    std::vector<FrozenTensors> weights;
    std::vector<Slot> slots;
    int64_t padded = 0;  // bytes, a multiple of the group's size
    at::Tensor shard;    // uint8 [padded / N] on the device
    at::Tensor full;     // uint8 [padded] while gathered or in flight
    distributed::WorkPtr gather;
    State state = State::released;
    bool partitioned = false;
    bool backward_reads = false;
  };

  void launch(size_t layer);
  void ensure_gathered(size_t layer);
  void bind(size_t layer);
  void release(size_t layer);
  // The layout of layer l's bytes from its tensors as they are now.
  void lay_out(size_t layer);
  std::vector<at::Tensor> tensors_of(size_t layer, size_t weight) const;

  std::vector<Unit> units_;
  std::unordered_map<std::string, int> layer_of_name_;
  int last_holding_ = -1;  // the last layer with frozen weights
  std::shared_ptr<distributed::Communicator> dp_;
  c10::Device device_;
  int64_t prefetch_bytes_;
  int64_t live_ = 0, peak_live_ = 0;
};

}  // namespace stratum::zero
