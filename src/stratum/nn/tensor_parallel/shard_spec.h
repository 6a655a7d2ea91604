#pragma once
// How a tensor-parallel rank's parameter is cut from the whole one: along
// `dim` the whole tensor (zero-padded to `padded` rows first, for a
// vocabulary) is `blocks` equal blocks (GPT-2's fused QKV: q, k, v), each cut
// into `parts` equal pieces; the rank holds piece `index` of every block,
// concatenated. Parameters without a spec are replicated: every rank holds
// them whole. `parts` may be fewer than the group's size (LLaMA's key/value
// heads when there are fewer of them than ranks): size / parts ranks then
// hold the same piece, each computing part of its gradient.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace stratum::nn::tp {

struct ShardSpec {
  int64_t dim = 0;
  int64_t blocks = 1;
  int64_t parts = 1;
  int64_t index = 0;
  int64_t padded = 0;  // the whole size along dim after padding; 0: no padding
  // How many ranks of a group of `size` hold this same piece.
  int64_t replicas(int64_t size) const { return size / parts; }
};

// The rank's piece of `whole` (a new contiguous tensor).
at::Tensor take_shard(const at::Tensor& whole, const ShardSpec& spec);
// The shape of the piece for a whole tensor of `whole_shape`.
std::vector<int64_t> shard_shape(std::vector<int64_t> whole_shape, const ShardSpec& spec);

}  // namespace stratum::nn::tp
