#include "stratum/nn/embedding.h"

#include <mutex>
#include <unordered_map>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Registry {
  struct Entry {
    RowGradientSink* sink;
    at::Tensor anchor;  // see RowLookup
  };
  std::mutex mutex;
  std::unordered_map<const void*, Entry> sinks;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The sink for `weight` and its anchor; {nullptr, undefined} without one.
Registry::Entry entry_for(const at::Tensor& weight) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sinks.find(weight.unsafeGetTensorImpl());
  return it == r.sinks.end() ? Registry::Entry{nullptr, at::Tensor()} : it->second;
}

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
    RowGradientSink* sink = entry_for(weight).sink;
    if (!sink)
      throw Error("embedding: the row-gradient sink was unregistered between forward and backward; "
                  "the lookup's gradient has nowhere to go");
    sink->take_rows(weight, ids.reshape({-1}), grads[0].reshape({-1, grads[0].size(-1)}));
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

void register_row_gradient_sink(const at::Tensor& weight, RowGradientSink* sink) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sinks.find(weight.unsafeGetTensorImpl());
  if (it != r.sinks.end() && it->second.sink != sink)
    throw Error("embedding: a row-gradient sink is already registered for this weight (two engines on one model?)");
  if (it == r.sinks.end())
    r.sinks.emplace(weight.unsafeGetTensorImpl(),
                    Registry::Entry{sink, at::empty({0}, weight.options()).set_requires_grad(true)});
}

void unregister_row_gradient_sink(const at::Tensor& weight, const RowGradientSink* sink) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sinks.find(weight.unsafeGetTensorImpl());
  if (it != r.sinks.end() && it->second.sink == sink) r.sinks.erase(it);
}

at::Tensor embedding_lookup(const at::Tensor& weight, const at::Tensor& ids) {
  if (!at::GradMode::is_enabled() || !weight.requires_grad()) return at::embedding(weight, ids);
  const Registry::Entry sink = entry_for(weight);
  if (sink.sink) return RowLookup::apply(sink.anchor, &weight, ids);
  return DenseLookup::apply(weight, ids);
}

}  // namespace stratum::nn
