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
  std::mutex mutex;
  std::unordered_map<const void*, RowGradientSink*> sinks;
};

Registry& registry() {
  static Registry r;
  return r;
}

RowGradientSink* sink_for(const at::Tensor& weight) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sinks.find(weight.unsafeGetTensorImpl());
  return it == r.sinks.end() ? nullptr : it->second;
}

struct EmbeddingLookup : torch::autograd::Function<EmbeddingLookup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids) {
    ctx->save_for_backward({weight, ids});
    ctx->saved_data["rows"] = weight.size(0);  // ZeRO-3 may have released the weight by backward
    return at::embedding(weight, ids);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& weight = saved[0];
    const at::Tensor& ids = saved[1];
    if (!ctx->needs_input_grad(0)) return {at::Tensor(), at::Tensor()};
    if (RowGradientSink* sink = sink_for(weight)) {
      const at::Tensor g = grads[0].reshape({-1, grads[0].size(-1)});
      sink->take_rows(weight, ids.reshape({-1}), g);
      return {at::Tensor(), at::Tensor()};
    }
    return {at::embedding_dense_backward(grads[0], ids, ctx->saved_data["rows"].toInt(), /*padding_idx=*/-1,
                                         /*scale_grad_by_freq=*/false),
            at::Tensor()};
  }
};

}  // namespace

void register_row_gradient_sink(const at::Tensor& weight, RowGradientSink* sink) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, added] = r.sinks.emplace(weight.unsafeGetTensorImpl(), sink);
  if (!added && it->second != sink)
    throw Error("embedding: a row-gradient sink is already registered for this weight (two engines on one model?)");
}

void unregister_row_gradient_sink(const at::Tensor& weight, const RowGradientSink* sink) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.sinks.find(weight.unsafeGetTensorImpl());
  if (it != r.sinks.end() && it->second == sink) r.sinks.erase(it);
}

at::Tensor embedding_lookup(const at::Tensor& weight, const at::Tensor& ids) {
  return EmbeddingLookup::apply(weight, ids);
}

}  // namespace stratum::nn
