#pragma once
// A model as an ordered list of layers, each mapping one tensor to one tensor.
//
// Why: torch::nn::Module in C++ has no forward hooks, so Stratum cannot step
// into a user's forward() the way DeepSpeed does in Python. ZeRO-3 (gather a
// layer's parameters before it runs, release them after), activation
// checkpointing and pipeline stages need the engine to own the loop over
// layers; a LayerStack gives it that loop (DeepSpeed's PipelineModule,
// Megatron's block list). forward() is the plain loop; run() runs a range.
//
// Parameter names: each layer's direct submodules are registered under a dotted
// path chosen at append() (through holder modules), not under the layer
// itself, so that several layers can share a prefix and named_parameters()
// reads exactly as Hugging Face's names ("transformer.wte.weight",
// "transformer.h.0.attn.c_attn.weight", "transformer.ln_f.weight", ...).
// A layer therefore owns no parameters or buffers directly, only submodules.
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "stratum/nn/sequence_layout.h"

namespace stratum::nn {

// One layer of a LayerStack. `name` (torch::nn::Module::name()) is its kind,
// e.g. "GPT2Block": pipeline partitioning by type matches it.
class StackLayer : public torch::nn::Module {
 public:
  explicit StackLayer(std::string kind) : torch::nn::Module(std::move(kind)) {}
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // Parameters this layer reads but another layer owns (the LM head reading the
  // tied token embedding). ZeRO-3 must gather them for this layer too, and
  // pipeline stages holding both layers must sum their gradients.
  virtual std::vector<at::Tensor> borrowed_parameters() const { return {}; }
  // Parameters whose gradient comes only from nn::embedding_lookup (an untied
  // token embedding): ZeRO stages 0-2 exchange their looked-up rows'
  // gradients instead of reducing a dense one (nn/embedding.h).
  virtual std::vector<at::Tensor> row_gradient_parameters() const { return {}; }
  // True when each of this layer's parameters that nn::linear / linear_stacked
  // reads reaches the loss through exactly one such call and nothing else:
  // ZeRO may then have the weight-gradient GEMM write straight into
  // their flat gradient (gradient_accumulation_fusion, nn/linear.h). A layer
  // that also reads a linear's weight elsewhere, or twice, leaves it false.
  virtual bool linear_weights_fusable() const { return false; }
};

// Runs one layer on the stack's behalf: the engine installs one to gather a
// layer's ZeRO-3 parameters around it and to checkpoint its activations.
class LayerRunner {
 public:
  virtual ~LayerRunner() = default;
  virtual at::Tensor run_layer(size_t index, StackLayer& layer, const at::Tensor& x) = 0;
};

class LayerStackImpl : public torch::nn::Module {
 public:
  explicit LayerStackImpl(std::string name = "LayerStack")
      : torch::nn::Module(std::move(name)), layout_(std::make_shared<SequenceLayoutSlot>()) {}

  // Appends `layer`; its direct submodule `c` is registered as `path.c`
  // (`c` alone when `path` is empty). Throws stratum::Error if the layer holds
  // parameters or buffers of its own, or a name is taken.
  void append(std::shared_ptr<StackLayer> layer, const std::string& path);

  // All layers in order.
  at::Tensor forward(const at::Tensor& input) { return run(input, 0, size()); }
  // Layers [begin, end) in order (a pipeline stage's share).
  at::Tensor run(const at::Tensor& input, size_t begin, size_t end);

  size_t size() const { return layers_.size(); }
  StackLayer& layer(size_t i) const { return *layers_.at(i); }
  const std::shared_ptr<StackLayer>& layer_ptr(size_t i) const { return layers_.at(i); }
  // The prefix the layer's submodules are registered under ("transformer.h.3").
  const std::string& layer_path(size_t i) const { return paths_.at(i); }
  // The name of the user scope (ATen RecordFunction, RecordScope::USER_SCOPE)
  // that run() opens around layer i, "layers.<i> (<kind>)": observers such as
  // the engine's flops profiler and torch's profiler see which layer an op
  // belongs to. Without a callback installed the scope costs a check.
  const std::string& layer_scope(size_t i) const { return scopes_.at(i); }

  // Every layer then runs through `runner` (nullptr: plainly).
  void set_runner(std::shared_ptr<LayerRunner> runner) { runner_ = std::move(runner); }
  const std::shared_ptr<LayerRunner>& runner() const { return runner_; }

  // The packed rows' layout of the micro-batch being run, shared with the
  // layers that read it (nn/sequence_layout.h); the engine sets it.
  const std::shared_ptr<SequenceLayoutSlot>& sequence_layout() const { return layout_; }

  // Layers are not registered children (their submodules are), so the
  // training flag is passed to them here.
  void train(bool on = true) override;

 private:
  torch::nn::Module& holder(const std::string& path);

  std::vector<std::shared_ptr<StackLayer>> layers_;
  std::vector<std::string> paths_;
  std::vector<std::string> scopes_;
  std::shared_ptr<LayerRunner> runner_;
  std::shared_ptr<SequenceLayoutSlot> layout_;
};

}  // namespace stratum::nn
