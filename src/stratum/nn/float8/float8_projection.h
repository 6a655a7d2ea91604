#pragma once
// One FP8 GEMM site of a model: a linear layer, or projections stacked along
// the output dimension that read the same input (q/k/v, gate/up). It holds
// the recipe, the layer's name for messages, its weight's FP8 copies (W and
// the transposed Wᵀ) for the current optimizer step, and the flags of
// operands whose amax was not finite.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "stratum/nn/float8/cast.h"
#include "stratum/nn/float8/weight_cache.h"

namespace stratum::nn::float8 {

// How each operand is cast (torchao's recipes):
//   tensorwise: one scale a tensor from its current amax; e4m3 for x and W,
//     e5m2 for the gradient dy (wider range under one scale for all rows;
//     cuBLASLt takes e5m2 x e4m3 tensorwise products).
//   rowwise: one scale a row along each GEMM's contraction axis, rounded down
//     to a power of two; e4m3 for every operand (per-row scales leave each row
//     little range to cover, so the extra mantissa bit wins; cuBLASLt's
//     rowwise FP8 GEMMs take e4m3 only).
//   blockwise (DeepSeek-V3's): x and dy in 1x128 blocks along each GEMM's
//     contraction axis, W in 128x128 blocks; e4m3 throughout, fp32 scales
//     (an outlier moves the scale of its block only).
struct Recipe {
  Scaling scaling = Scaling::tensorwise;         // x and dy
  Scaling weight_scaling = Scaling::tensorwise;  // W
  Format forward_format = Format::e4m3;  // x and W
  Format grad_format = Format::e5m2;     // dy
  bool power_of_2 = false;
  CastSpec forward() const { return {forward_format, scaling, power_of_2}; }
  CastSpec weight() const { return {forward_format, weight_scaling, power_of_2}; }
  CastSpec grad() const { return {grad_format, scaling, power_of_2}; }
};
Recipe tensorwise_recipe();
Recipe rowwise_recipe();
Recipe blockwise_recipe();
const char* recipe_name(const Recipe& r);

// The operands whose amax a projection watches.
enum class Operand { input, weight, grad_output };
const char* operand_name(Operand o);

// Which dimension of y = x Wᵀ a projection's shards split over a
// tensor-parallel group (nn/tensor_parallel/float8_layers.h):
//   output       N: column-parallel (W's rows, dy's columns are shards)
//   contraction  K: row-parallel (x's columns, W's columns are shards)
enum class SplitAxis { none, output, contraction };
// The split dimension of an operand as cast (x [M, K], W [N, K], dy [M, N]):
// 0, 1, or -1 where the operand is whole on every rank.
int split_dim(SplitAxis axis, Operand o);

// A projection's W as ZeRO-3 gathers it in FP8 (zero/float8_unit_gather.h):
// its weights stacked along dim 0 as one tensorwise FP8 matrix, set while
// their layer is gathered and emptied when it is released. Shared by the
// projection, the backward passes that read it, and the gatherer.
struct GatheredWeight {
  Float8Tensor w;
};

class Float8Projection {
 public:
  // `name`: the layer's ("layers.3.attn.c_attn", "layers.0.attn.q_proj+k_proj+v_proj").
  Float8Projection(std::string name, Recipe recipe, std::shared_ptr<WeightCache> cache);
  ~Float8Projection();
  Float8Projection(const Float8Projection&) = delete;
  Float8Projection& operator=(const Float8Projection&) = delete;

  const std::string& name() const { return name_; }
  const Recipe& recipe() const { return recipe_; }
  WeightCache& cache() { return *cache_; }

  // W = [w0; w1; ...] (stacked along dim 0) and Wᵀ in FP8: the copies made
  // at the first call since the cache's last invalidate(), and made again
  // when a weight was written in place or swapped since (its version or
  // storage moved: a load, an optimizer run outside the engine). When the
  // cache does not hold weights (ZeRO-3), W alone, cast at every call and
  // kept nowhere: the backward casts Wᵀ from the weight gathered again.
  Float8Pair weight(const std::vector<at::Tensor>& weights);

  // ZeRO-3 gathers this projection's weights in FP8 into `slot`: while the
  // slot holds W, weight() returns it and casts nothing, and the backward's
  // Wᵀ is its bytes transposed (the same scale). The parameters then hold
  // no values, only their shape (the gatherer binds them so).
  void read_gathered(std::shared_ptr<GatheredWeight> slot) { gathered_ = std::move(slot); }
  const std::shared_ptr<GatheredWeight>& gathered() const { return gathered_; }

  // The shards of this projection's GEMM are split over a tensor-parallel
  // group along `axis`: each operand whose scale spans the split dimension
  // (split_dim, cast_shard) has its amax reduced by `max_over_group`.
  void share_amax(SplitAxis axis, AmaxReducer max_over_group);
  SplitAxis split_axis() const { return split_axis_; }
  const AmaxReducer& amax_reducer() const { return max_over_group_; }

  // Records that `amax` (of operand `o`) holds an Inf or a NaN: on the CPU
  // it throws at once, naming this layer and the operand; on a GPU it sets a
  // device flag that WeightCache::check_finite reads.
  void record_amax(const at::Tensor& amax, Operand o);
  // The flags (bool [3], on the weights' device; undefined before the first
  // weight()), which a backward pass saves rather than a pointer to this.
  const at::Tensor& nonfinite_flags() const { return nonfinite_; }
  // The message for this projection's flags read back to the host (bool
  // [3]); empty when none is set.
  std::string nonfinite_message(const at::Tensor& flags_on_host) const;
  void clear_nonfinite();

 private:
  std::string name_;
  Recipe recipe_;
  std::shared_ptr<WeightCache> cache_;
  Float8Pair weight_;
  int64_t generation_ = -1;
  std::vector<std::pair<int64_t, const void*>> versions_;  // each weight's version and storage at the cast
  SplitAxis split_axis_ = SplitAxis::none;
  AmaxReducer max_over_group_;
  std::shared_ptr<GatheredWeight> gathered_;
  at::Tensor nonfinite_;
};

// The flags' update for an operand of a projection (record_amax's body),
// callable from a backward pass with what it saved: the flags and the name.
void record_amax(const at::Tensor& amax, Operand o, const at::Tensor& flags, const std::string& layer);

}  // namespace stratum::nn::float8
