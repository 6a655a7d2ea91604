#pragma once
// Where every parameter lives in ZeRO's flat buffers, and which part of each
// bucket a rank owns. Pure arithmetic: no tensors, no communicator.
//
// Parameters are grouped into buckets of whole parameters (up to
// `bucket_elems`; a larger parameter gets a bucket of its own), in reverse
// registration order, because backward produces the last layers' gradients
// first. The flat buffer holds the buckets one after another; each bucket is
// padded to a multiple of the data-parallel size N and split into N equal,
// contiguous slices: rank r owns slice r of every bucket. A bucket is thus
// one reduce-scatter (gradients) and one all-gather (parameters), both on
// contiguous memory, and a rank's shard (its slices, concatenated) is Ψ/N.
#include <cstdint>
#include <string>
#include <vector>

namespace stratum::zero {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

struct ParamSlot {
  int64_t offset = 0;  // in the flat buffer
  int64_t numel = 0;
  int bucket = 0;
};

struct BucketSpan {
  int64_t offset = 0;        // in the flat buffer
  int64_t numel = 0;         // padded: a multiple of the DP size
  int64_t used = 0;          // elements that belong to parameters (the rest is padding)
  int64_t shard_offset = 0;  // where this bucket's slice sits in a rank's shard
  std::vector<int> params;   // indices into the parameter list
  int64_t slice_numel(int dp) const { return numel / dp; }
};

// A run of the flat buffer that this rank's optimizer segment `segment` holds
// from `segment_offset` on: how checkpoints map shards back to parameters.
struct FlatPiece {
  int64_t flat_offset = 0;
  int64_t numel = 0;
  int segment = 0;
  int64_t segment_offset = 0;
};

class FlatLayout {
 public:
  // `params` in registration order. Throws stratum::Error when there are none.
  // `alone`: parameters that get a bucket of their own (row-fed embeddings,
  // whose bucket is exchanged as rows instead of reduced).
  static FlatLayout build(const std::vector<ParamSpec>& params, int64_t bucket_elems, int dp_size,
                          const std::vector<int>& alone = {});
  // ZeRO-3: one bucket per group (a layer's parameters), in the order given.
  // Every parameter must be in exactly one group; empty groups get no bucket.
  static FlatLayout build_groups(const std::vector<ParamSpec>& params, const std::vector<std::vector<int>>& groups,
                                 int dp_size);

  int dp_size() const { return dp_; }
  int64_t total_numel() const { return total_; }    // flat buffer, padding included
  int64_t shard_numel() const { return total_ / dp_; }
  int64_t param_numel() const { return param_numel_; }  // Ψ: without padding
  const std::vector<ParamSlot>& params() const { return slots_; }
  // Names and shapes, by parameter index (checkpoints address parameters by name).
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const std::vector<BucketSpan>& buckets() const { return buckets_; }
  // Rank r's slice of every bucket, as held by one optimizer segment (the
  // shard, each slice at its bucket's shard_offset) or, with
  // `segment_per_bucket` (stage 1), by one segment per bucket.
  std::vector<FlatPiece> rank_pieces(int rank, bool segment_per_bucket) const;
  // Flat-buffer offset of rank r's slice of bucket b.
  int64_t slice_offset(int b, int rank) const { return buckets_[b].offset + rank * buckets_[b].slice_numel(dp_); }

 private:
  int dp_ = 1;
  int64_t total_ = 0;
  int64_t param_numel_ = 0;
  std::vector<ParamSlot> slots_;
  std::vector<ParamSpec> specs_;
  std::vector<BucketSpan> buckets_;
};

}  // namespace stratum::zero
