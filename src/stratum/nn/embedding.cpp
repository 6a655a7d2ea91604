#include "stratum/nn/embedding.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"
#include "stratum/nn/param_registry.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SinkEntry {
  static constexpr const char* kWhat = "embedding: a row-gradient sink";
  RowGradientSink* sink;
  at::Tensor anchor;  // see RowLookup
};
using Sinks = ParamRegistry<SinkEntry>;

// No sink: ATen's dense gradient for the weight.
struct DenseLookup : torch::autograd::Function<DenseLookup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids) {
    ctx->save_for_backward({ids});
    ctx->saved_data["rows"] = weight.size(0);
    return at::embedding(weight, ids);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ids = ctx->get_saved_variables()[0];
    return {at::embedding_dense_backward(grads[0], ids, ctx->saved_data["rows"].toInt(), /*padding_idx=*/-1,
                                         /*scale_grad_by_freq=*/false),
            at::Tensor()};
  }
};

// A sink: the weight is not an input of this node, so autograd does not hold
// the weight's gradient hook back for it. A tied LM head's dense gradient is
// then complete (and its reduction under way) as soon as the head's backward
// ends, not after the lookup's, the last op of backward. The anchor, an empty
// leaf that requires grad, makes autograd run this node's backward, which
// hands the rows to the sink.
struct RowLookup : torch::autograd::Function<RowLookup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& /*anchor*/, const at::Tensor* weight,
                            const at::Tensor& ids) {
    ctx->save_for_backward({ids});
    ctx->saved_data["weight"] = *weight;
    return at::embedding(weight->detach(), ids);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ids = ctx->get_saved_variables()[0];
    const at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const std::optional<SinkEntry> entry = Sinks::instance().find(weight);
    if (!entry)
      throw Error("embedding: the row-gradient sink was unregistered between forward and backward; "
                  "the lookup's gradient has nowhere to go");
    entry->sink->take_rows(weight, ids.reshape({-1}), grads[0].reshape({-1, grads[0].size(-1)}));
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

void register_row_gradient_sink(const at::Tensor& weight, RowGradientSink* sink) {
  Sinks::instance().add(weight, SinkEntry{sink, at::empty({0}, weight.options()).set_requires_grad(true)});
}

void unregister_row_gradient_sink(const at::Tensor& weight, const RowGradientSink* sink) {
  Sinks::instance().remove(weight, sink);
}

at::Tensor embedding_lookup(const at::Tensor& weight, const at::Tensor& ids) {
  if (!at::GradMode::is_enabled() || !weight.requires_grad()) return at::embedding(weight, ids);
  if (const std::optional<SinkEntry> entry = Sinks::instance().find(weight))
    return RowLookup::apply(entry->anchor, &weight, ids);
  return DenseLookup::apply(weight, ids);
}

}  // namespace stratum::nn
