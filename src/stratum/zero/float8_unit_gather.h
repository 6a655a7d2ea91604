#pragma once
// ZeRO-3's all-gather of a layer in FP8: the weights that reach their GEMMs
// only through FP8 projections (nn/float8/) travel as one byte an element
// instead of two, under tensorwise scaling.
//
// After each optimizer step every projection's scale is taken from its
// weights' amax over the data-parallel group (and over the tensor-parallel
// group, where its weights are split): one all-reduce of one float a
// projection for all of them. Each gather casts this rank's slice with those
// scales and all-gathers the bytes, and the gathered bytes are the
// projection's W: the same bytes that casting the gathered bf16 weight would
// give, since a tensorwise cast is elementwise once the scale is known. The
// parameters themselves then hold only their shape (autograd checks their
// gradients' shapes against it); whatever needs their values
// (for_each_full_param: checkpoints, export) gathers them in 16 bits.
//
// A layer's unit goes in FP8 when every parameter in it is the weight of an
// FP8 projection whose weights are all in it; any other parameter there (a
// norm's weight, under a persistence threshold below its size) keeps the
// whole unit in 16 bits.
#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stratum/distributed/communicator.h"
#include "stratum/nn/float8/float8_projection.h"
#include "stratum/zero/flat_layout.h"

namespace stratum::zero {

// One FP8 projection's weights.
struct Float8GatherGroup {
  std::string name;         // the projection's, for messages
  std::vector<int> params;  // its weights (indices into the strategy's parameters), stacked along dim 0 in this order
  std::shared_ptr<nn::float8::GatheredWeight> slot;  // where the gathered W goes (the projection reads it)
  // Max over the tensor-parallel group (in place), or null: the weights are
  // whole on every rank. The model's projections share one group, so the
  // first one given reduces every projection's amax at once (a weight whole
  // on every rank has the same amax everywhere: the max changes nothing).
  nn::float8::AmaxReducer max_over_tensor_parallel;
};

// What a gatherer gathers in FP8, for the log and the tests.
struct Float8GatherReport {
  int units = 0;              // the layers' units holding FP8 projections' weights
  int units_in_fp8 = 0;       // those gathered in FP8
  int64_t elems = 0;          // the elements of every layer's unit (persistent ones not counted), padding included
  int64_t elems_in_fp8 = 0;   // those of the units gathered in FP8
  std::string kept_16bit;     // a parameter that keeps a unit with FP8 weights in 16 bits (empty: none)
};

class Float8UnitGather {
 public:
  // `persistent`: the units that stay gathered (never in FP8).
  Float8UnitGather(std::vector<Float8GatherGroup> groups, const FlatLayout& layout,
                   const std::vector<bool>& persistent, int rank);

  bool in_fp8(int unit) const { return unit_groups_.at(unit).has_value(); }
  const Float8GatherReport& report() const { return report_; }

  // Every projection's scale, from this rank's 16-bit shard (`shard16`, the
  // layout's shard; on the host with offload_param): a collective over `dp`
  // (and the tensor-parallel group). `device`: where the gathers run.
  void take_scales(const at::Tensor& shard16, distributed::Communicator& dp, c10::Device device);

  // This rank's slice of `unit` in FP8 (bytes: kByte [slice numel]) from its
  // 16-bit slice on the gather's device; the padding is zeros.
  at::Tensor cast_slice(int unit, const at::Tensor& slice16) const;

  // The gathered bytes of `unit` (kByte [unit numel]) as its projections' W.
  void bind(int unit, const at::Tensor& full8) const;
  // Their slots emptied: the unit is released.
  void unbind(int unit) const;

 private:
  struct Scale {
    at::Tensor amax, scale_inv;  // 0-dim fp32 on the gather's device
  };
  std::vector<Float8GatherGroup> groups_;
  const FlatLayout& layout_;
  int rank_;
  std::vector<int> group_of_;                                  // per parameter: its group, or -1
  std::vector<std::optional<std::vector<int>>> unit_groups_;  // per unit: its groups, when in FP8
  std::vector<Scale> scales_;                                 // per group, from take_scales
  Float8GatherReport report_;
};

}  // namespace stratum::zero
