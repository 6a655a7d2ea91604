#pragma once
// Context parallelism: a sequence split over the ranks of a group, each rank
// holding its tokens' activations from the embedding to the loss, attention
// the one place the ranks meet (Ulysses: the sequence exchanged for heads by
// all-to-all, DeepSpeed-Ulysses; ring: key/value blocks passed around the
// ring and merged by their log-sum-exp, ring attention with the zigzag split;
// hybrid: Ulysses inside each ring rank). Which tokens a rank holds:
// context_split.h. The engine cuts each micro-batch (engine/context_shard.h)
// and sets the shard in the stack's SequenceLayout; attention reads it there.
// These files, tensor_parallel/ and moe/token_exchange are the nn/ files that
// see a communicator.
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"
#include "stratum/nn/context_parallel/context_split.h"
#include "stratum/nn/sequence_layout.h"

namespace stratum::nn::cp {

enum class Method { ulysses, ring, hybrid };
const char* method_name(Method m);

struct ContextParallel {
  Method method = Method::ring;
  // The whole group (size() ranks), its Ulysses group (consecutive ranks of
  // one ring rank) and ring group (the ranks of one Ulysses index). Null (or
  // of one rank) where the method has no such part; all null: no context
  // parallelism.
  std::shared_ptr<distributed::Communicator> group, ulysses, ring;

  int64_t size() const { return group ? group->size() : 1; }
  int64_t rank() const { return group ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
  int64_t ulysses_size() const { return ulysses ? ulysses->size() : 1; }
  int64_t ring_size() const { return ring ? ring->size() : 1; }
  ContextSplit split() const { return {size(), ulysses_size()}; }
};

// What a micro-batch's attention needs to meet the other ranks' tokens.
struct ContextShard {
  ContextParallel cp;
  int64_t whole_length = 0;  // the micro-batch's sequence, before the split
  // Packed rows: the whole rows' layout on the device (segment ids, positions,
  // the runs counted on the host); nullopt: each row is one sequence.
  std::optional<SequenceLayout> whole;
  // Ring attention's masked blocks (packed rows; and where no flash kernel
  // applies) are computed a tile of query rows at a time: this many (0: as
  // many as keep a tile's fp32 scores near 256 MiB).
  int64_t masked_tile_rows = 0;
};

// Causal attention of this rank's tokens under `shard`: q [B, H, T / size, D],
// k, v [B, KV, T / size, D] (H % KV == 0), this rank's positions in order;
// returns [B, H, T / size, D], differentiable in q, k, v. Throws Error naming
// the heads when Ulysses cannot split them, or dropout under the ring.
at::Tensor context_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                             const ContextShard& shard);

}  // namespace stratum::nn::cp
