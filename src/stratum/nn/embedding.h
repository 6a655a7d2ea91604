#pragma once
// A token embedding lookup whose gradient can go to a sink as rows.
//
// Why: the dense gradient of a [V, H] embedding is mostly zeros (a batch of
// 8k tokens touches at most 8k of 32k-50k rows), yet data parallelism
// all-reduces it whole, and last: the lookup's backward is the final op of
// the step's backward, so nothing hides that reduction. A sink registered for
// the weight (ZeRO stages 0-2 over several ranks) takes the rows' gradients
// instead and exchanges those. With no sink the gradient is ATen's dense one.
#include <ATen/core/Tensor.h>

namespace stratum::nn {

class RowGradientSink {
 public:
  virtual ~RowGradientSink() = default;
  // Autograd's thread: the lookup of `weight` at `ids` [N] got `grad_rows`
  // [N, H]; the weight gets no gradient from this lookup.
  virtual void take_rows(const at::Tensor& weight, const at::Tensor& ids, const at::Tensor& grad_rows) = 0;
};

// While registered, lookups of `weight` (the parameter, by identity) hand
// their gradient to `sink`. One sink a weight: registering a second throws.
void register_row_gradient_sink(const at::Tensor& weight, RowGradientSink* sink);
void unregister_row_gradient_sink(const at::Tensor& weight, const RowGradientSink* sink);

// weight[ids]: [..., H] for ids [...] (int64).
at::Tensor embedding_lookup(const at::Tensor& weight, const at::Tensor& ids);

}  // namespace stratum::nn
