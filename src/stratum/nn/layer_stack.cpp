#include "stratum/nn/layer_stack.h"

#include <ATen/record_function.h>

#include <optional>

#include "stratum/core/error.h"

namespace stratum::nn {

torch::nn::Module& LayerStackImpl::holder(const std::string& path) {
  torch::nn::Module* node = this;
  size_t start = 0;
  while (start < path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    const std::string segment = path.substr(start, dot - start);
    if (segment.empty()) throw Error("LayerStack: empty segment in path '" + path + "'");
    auto children = node->named_children();
    if (auto* found = children.find(segment)) {
      node = found->get();
    } else {
      node = node->register_module(segment, std::make_shared<torch::nn::Module>(segment)).get();
    }
    start = dot + 1;
  }
  return *node;
}

void LayerStackImpl::append(std::shared_ptr<StackLayer> layer, const std::string& path) {
  if (!layer) throw Error("LayerStack: null layer at '" + path + "'");
  const std::string where = "LayerStack layer " + std::to_string(layers_.size()) + " (" + layer->name() + " at '" +
                            path + "')";
  if (!layer->named_parameters(/*recurse=*/false).is_empty() || !layer->named_buffers(/*recurse=*/false).is_empty())
    throw Error(where + ": a layer may hold parameters only through submodules");
  torch::nn::Module& parent = holder(path);
  for (const auto& child : layer->named_children()) {
    if (parent.named_children().contains(child.key()))
      throw Error(where + ": '" + (path.empty() ? "" : path + ".") + child.key() + "' is already registered");
    parent.register_module(child.key(), child.value());
  }
  layer->train(is_training());
  scopes_.push_back("layers." + std::to_string(layers_.size()) + " (" + layer->name() + ")");
  layers_.push_back(std::move(layer));
  paths_.push_back(path);
}

at::Tensor LayerStackImpl::run(const at::Tensor& input, size_t begin, size_t end) {
  if (begin > end || end > layers_.size())
    throw Error("LayerStack::run: range [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                std::to_string(layers_.size()) + " layers");
  at::Tensor x = input;
  for (size_t i = begin; i < end; ++i) {
    // The layer's user scope, only when some callback wants it (layer_scope()).
    std::optional<at::RecordFunction> scope;
    if (auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE)) {
      scope.emplace(std::move(*callbacks));
      if (scope->needsInputs()) {
        const c10::IValue in(x);
        scope->before(std::string_view(scopes_[i]), c10::ArrayRef<const c10::IValue>(&in, 1));
      } else {
        scope->before(std::string_view(scopes_[i]));
      }
    }
    x = runner_ ? runner_->run_layer(i, *layers_[i], x) : layers_[i]->forward(x);
  }
  return x;
}

void LayerStackImpl::train(bool on) {
  torch::nn::Module::train(on);
  for (auto& layer : layers_) layer->train(on);
}

}  // namespace stratum::nn
