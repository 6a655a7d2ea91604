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
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn::tp {

struct ShardSpec {
  int64_t dim = 0;
  int64_t blocks = 1;
  int64_t parts = 1;
  int64_t index = 0;
  int64_t padded = 0;  // the whole size along dim after padding; 0: no padding
  int64_t unpadded = 0;  // with padding: the whole size along dim before it
  // How many ranks of a group of `size` hold this same piece.
  int64_t replicas(int64_t size) const { return size / parts; }
};

// A module whose parameters are tensor-parallel shards: what the engine asks
// to count each gradient once in the norm and to sum the partial ones.
// Contract: a parameter with a spec of `parts` == size is split (each rank's
// gradient is its own piece's, whole); one with fewer parts is computed in
// part by each rank holding the piece; a replicated one gets the same
// gradient on every rank, except under sequence parallelism, where it is read
// on the rank's slice of the sequence (norms, biases added after a
// reduce-scatter, positions) and each rank holds part of it.
class ShardedModule {
 public:
  virtual ~ShardedModule() = default;
  virtual const TensorParallel& tensor_parallel() const = 0;
  // The spec of parameter `name` (as named_parameters() names it) at `rank` of
  // the group; nullopt: replicated.
  virtual std::optional<ShardSpec> shard_spec(const std::string& name, int64_t rank) const = 0;
};

// The rank's piece of `whole` (a new contiguous tensor).
at::Tensor take_shard(const at::Tensor& whole, const ShardSpec& spec);
// The shape of the piece for a whole tensor of `whole_shape`.
std::vector<int64_t> shard_shape(std::vector<int64_t> whole_shape, const ShardSpec& spec);
// The whole tensor's shape (padding dropped) from its piece's.
std::vector<int64_t> whole_shape(std::vector<int64_t> piece_shape, const ShardSpec& spec);
// Writes `piece` where take_shard(whole, spec) took it from (rows of the
// padding, which `whole` lacks, are dropped).
void place_shard(at::Tensor& whole, const at::Tensor& piece, const ShardSpec& spec);

}  // namespace stratum::nn::tp
