#include "stratum/nn/sequence_layout.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"
#include "stratum/nn/segment_runs.h"
#include "stratum/nn/varlen_attention.h"

namespace stratum::nn {

void check_sequence_layout(const SequenceLayout& l) {
  if (!l.segment_ids.defined() || !l.position_ids.defined())
    throw Error("sequence layout: segment_ids and position_ids come together");
  if (l.segment_ids.dim() != 2 || l.segment_ids.sizes() != l.position_ids.sizes())
    throw Error("sequence layout: segment_ids " + c10::str(l.segment_ids.sizes()) + " and position_ids " +
                c10::str(l.position_ids.sizes()) + " must both be [batch, sequence]");
  if (l.segment_ids.scalar_type() != at::kInt || l.position_ids.scalar_type() != at::kLong)
    throw Error(std::string("sequence layout: segment_ids must be int32 and position_ids int64, got ") +
                c10::toString(l.segment_ids.scalar_type()) + " and " + c10::toString(l.position_ids.scalar_type()));
  if (l.segment_ids.device() != l.position_ids.device())
    throw Error("sequence layout: segment_ids and position_ids on different devices");
}

SequenceLayout layout_of_length(const SequenceLayout& l, int64_t length) {
  const int64_t t = l.segment_ids.size(1);
  if (length == t) return l;
  if (length < t)
    return {l.segment_ids.narrow(1, 0, length), l.position_ids.narrow(1, 0, length), nullptr, l.context};
  return {at::constant_pad_nd(l.segment_ids, {0, length - t}, -1), at::constant_pad_nd(l.position_ids, {0, length - t}, 0),
          l.runs, l.context};
}

at::Tensor segment_causal_mask(const at::Tensor& segment_ids) {
  const int64_t t = segment_ids.size(1);
  const at::Tensor same = segment_ids.unsqueeze(2) == segment_ids.unsqueeze(1);  // [B, T, T]
  const at::Tensor causal = at::ones({t, t}, segment_ids.options().dtype(at::kBool)).tril();
  return (same & causal).unsqueeze(1);
}

at::Tensor segment_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                             const SequenceLayout& rows) {
  if (rows.runs && rows.runs->contiguous() && q.size(2) >= rows.runs->length() && varlen_attention_applies(q, k))
    return varlen_causal_attention(q, k, v, rows.runs->sequences(q.size(2), q.device()), dropout_p);
  // The memory-efficient GPU kernel takes a mask but not grouped heads: k/v repeated per query head for it.
  const at::Tensor mask = segment_causal_mask(rows.segment_ids);
  const int64_t group = q.size(1) / k.size(1);
  const at::Tensor kk = group > 1 ? k.repeat_interleave(group, 1) : k;
  const at::Tensor vv = group > 1 ? v.repeat_interleave(group, 1) : v;
  return at::scaled_dot_product_attention(q, kk, vv, mask, dropout_p, /*is_causal=*/false);
}

void SequenceLayoutSlot::set(SequenceLayout layout) {
  check_sequence_layout(layout);
  layout_ = std::move(layout);
}

SequenceLayoutScope::SequenceLayoutScope(SequenceLayoutSlot* slot, const std::optional<SequenceLayout>& layout) {
  if (!slot || !layout) return;
  slot->set(*layout);
  slot_ = slot;
}

SequenceLayoutScope::~SequenceLayoutScope() {
  if (slot_) slot_->clear();
}

}  // namespace stratum::nn
