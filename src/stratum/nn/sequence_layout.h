#pragma once
// Rows that pack several examples (data/packing.h): the example each
// position belongs to and its position within that example. Attention reads
// it to keep the examples apart (a block-diagonal causal mask) and the
// position encodings (RoPE, GPT-2's learned positions) to restart at each
// example, so that a packed row computes what each of its examples computes
// alone.
//
// A LayerStack holds one SequenceLayoutSlot that its layers share. The
// engine sets it to a micro-batch's layout for that micro-batch's forward and
// its backward (which recomputes checkpointed layers) and clears it after. An
// empty slot: every row is one sequence from position 0.
#include <memory>
#include <optional>

#include <ATen/core/Tensor.h>

namespace stratum::nn {

class SegmentRuns;
namespace cp {
struct ContextShard;
}

struct SequenceLayout {
  at::Tensor segment_ids;   // int32 [B, T]: the example within its row, -1 on padding
  at::Tensor position_ids;  // int64 [B, T]: 0 at each example's first token
  // The rows' runs, counted on the host (nn/segment_runs.h): variable-length
  // attention reads them instead of a mask. Null: not counted.
  std::shared_ptr<const SegmentRuns> runs{};
  // Context parallelism (nn/context_parallel/context_parallel.h): the rows
  // above are this rank's tokens of the whole sequence (their positions
  // those of the whole: RoPE reads them), and attention meets the other
  // ranks' through the shard. Null: the rows are whole.
  std::shared_ptr<const cp::ContextShard> context{};
};

// Throws stratum::Error unless both are defined, [B, T] alike, segment ids
// int32 and positions int64, on one device.
void check_sequence_layout(const SequenceLayout& layout);

// The layout for `length` positions: cut (its runs dropped), or padded on
// the right with segment -1 and position 0 (sequence parallelism pads the
// tokens so). The context shard, if any, stays.
SequenceLayout layout_of_length(const SequenceLayout& layout, int64_t length);

// Where query i may read key j: the same segment and j <= i. bool [B, 1, T, T].
// Every row has its diagonal, so no query reads nothing (padding reads padding).
at::Tensor segment_causal_mask(const at::Tensor& segment_ids);

// Causal attention within each segment of `rows` (at q's length): through
// variable-length flash attention where the runs are known and the kernel
// applies (nn/varlen_attention.h), else SDPA with segment_causal_mask (the
// memory-efficient GPU kernel, k/v repeated per query head). q: [B, H, T, D];
// k, v: [B, KV, T, D].
at::Tensor segment_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                             const SequenceLayout& rows);

class SequenceLayoutSlot {
 public:
  const SequenceLayout* get() const { return layout_ ? &*layout_ : nullptr; }
  void set(SequenceLayout layout);  // checked
  void clear() { layout_.reset(); }

 private:
  std::optional<SequenceLayout> layout_;
};

// A slot set for a scope (nothing when the layout is absent), cleared after.
class SequenceLayoutScope {
 public:
  SequenceLayoutScope(SequenceLayoutSlot* slot, const std::optional<SequenceLayout>& layout);
  ~SequenceLayoutScope();
  SequenceLayoutScope(const SequenceLayoutScope&) = delete;
  SequenceLayoutScope& operator=(const SequenceLayoutScope&) = delete;

 private:
  SequenceLayoutSlot* slot_ = nullptr;
};

}  // namespace stratum::nn
