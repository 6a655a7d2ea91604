#include "stratum/engine/layer_runner.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "stratum/core/error.h"
#include "stratum/core/log.h"
#include "stratum/distributed/init.h"
#include "stratum/engine/out_of_memory.h"
#include "stratum/nn/checkpoint.h"

namespace stratum {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The layer whose parameters BeforeLayerBackward gathers, or whose frozen
// base AfterLayerBackward releases; the node holds it as a capsule.
struct GatheredLayer : torch::CustomClassHolder {
  GatheredLayer(zero::LayerParamGatherer* g, zero::FrozenUnits* f, size_t i) : gatherer(g), frozen(f), layer(i) {}
  zero::LayerParamGatherer* gatherer;  // stage 3's, owned by the strategy (may be null)
  zero::FrozenUnits* frozen;           // owned by the core (may be null)
  size_t layer;
};

// Identity on a layer's output whose backward runs before the layer's own:
// the moment to gather the layer's parameters again.
struct BeforeLayerBackward : torch::autograd::Function<BeforeLayerBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, zero::LayerParamGatherer* gatherer,
                            zero::FrozenUnits* frozen, size_t layer) {
    ctx->saved_data["layer"] = at::IValue::make_capsule(c10::make_intrusive<GatheredLayer>(gatherer, frozen, layer));
    return y;  // returned as is: autograd wraps it as a view of the input
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data.at("layer").toCapsule();
    const auto& l = *static_cast<const GatheredLayer*>(holder.get());
    if (l.gatherer) l.gatherer->before_backward(l.layer);
    if (l.frozen) l.frozen->before_backward(l.layer);
    return {grads[0], at::Tensor(), at::Tensor(), at::Tensor()};  // one per forward argument
  }
};

// Identity on a layer's input whose backward runs once the layer's backward
// has given the input its whole gradient: its frozen base is read no more.
struct AfterLayerBackward : torch::autograd::Function<AfterLayerBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, zero::FrozenUnits* frozen, size_t layer) {
    ctx->saved_data["layer"] = at::IValue::make_capsule(c10::make_intrusive<GatheredLayer>(nullptr, frozen, layer));
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data.at("layer").toCapsule();
    const auto& l = *static_cast<const GatheredLayer*>(holder.get());
    l.frozen->after_backward(l.layer);
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ContiguousCheckpointInputs::store(const at::Tensor& x) {
  const bool fits = buffer_.defined() && x.sizes().vec() == slot_sizes_ && x.scalar_type() == buffer_.scalar_type() &&
                    x.device() == buffer_.device() && next_ < slots_;
  if (next_ == 0 && (!fits || buffer_.storage().use_count() > 1)) {
    // The first slot of a forward: a new buffer unless this one is free and of the right shape.
    at::TensorOptions opts = x.options();
    if (x.is_cpu() && x.is_pinned()) opts = opts.pinned_memory(true);
    buffer_ = at::empty({static_cast<int64_t>(slots_) * x.numel()}, opts);
    slot_sizes_ = x.sizes().vec();
    ++allocations_;
  } else if (!fits) {
    return x;
  }
  // The slot aliases the buffer's storage but is no view of it: a view would
  // share the buffer's version counter, and writing the next slot would look
  // to autograd like an in-place change of this saved input.
  at::Tensor slot = at::empty({0}, buffer_.options());
  slot.set_(buffer_.storage(), static_cast<int64_t>(next_++) * x.numel(), x.sizes());
  slot.copy_(x, /*non_blocking=*/x.is_pinned());
  return slot;
}

EngineLayerRunner::EngineLayerRunner(zero::LayerParamGatherer* gatherer, zero::FrozenUnits* frozen,
                                     std::vector<bool> checkpointed, const config::ActivationCheckpointingConfig& ac,
                                     bool lead, int64_t print_every, const int64_t* global_steps)
    : gatherer_(gatherer),
      frozen_(frozen),
      checkpointed_(std::move(checkpointed)),
      host_checkpointed_(host_checkpointed_layers(checkpointed_, ac)),
      first_checkpointed_(std::find(checkpointed_.begin(), checkpointed_.end(), true) - checkpointed_.begin()),
      lead_(lead),
      print_every_(std::max<int64_t>(1, print_every)),
      global_steps_(global_steps),
      next_print_(print_every_) {
  host_blocks_ = std::count(host_checkpointed_.begin(), host_checkpointed_.end(), true);
  local_ranks_ = distributed::local_world_size_from_env();
  options_.synchronize = ac.synchronize_checkpoint_boundary;
  if (ac.profile) options_.profile = std::make_shared<nn::CheckpointTimes>();
  host_options_ = options_;
  host_options_.offload_input = true;
  if (ac.contiguous_memory_optimization) {
    // One buffer for the inputs kept on the device and one for the host's:
    // a slot takes only inputs of its buffer's device.
    const size_t n = std::count(checkpointed_.begin(), checkpointed_.end(), true),
                 host = std::count(host_checkpointed_.begin(), host_checkpointed_.end(), true);
    auto attach = [](std::unique_ptr<ContiguousCheckpointInputs>& buffer, nn::CheckpointOptions& options,
                     size_t slots) {
      if (slots == 0) return;
      buffer = std::make_unique<ContiguousCheckpointInputs>(slots);
      ContiguousCheckpointInputs* inputs = buffer.get();
      options.store = [inputs](const at::Tensor& x) { return inputs->store(x); };
    };
    attach(contiguous_, options_, n - host);
    attach(contiguous_host_, host_options_, host);
  }
}

void EngineLayerRunner::report_profile() {
  if (!options_.profile || !global_steps_ || *global_steps_ < next_print_) return;
  while (next_print_ <= *global_steps_) next_print_ += print_every_;
  nn::CheckpointTimes& t = *options_.profile;
  if (lead_ && (t.forwards > 0 || t.recomputes > 0)) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "activation checkpointing at step %lld: %lld checkpointed forwards %.2f ms, %lld recomputations "
                  "%.2f ms, their backward %.2f ms",
                  static_cast<long long>(*global_steps_), static_cast<long long>(t.forwards), t.forward_s * 1e3,
                  static_cast<long long>(t.recomputes), t.recompute_s * 1e3, t.backward_s * 1e3);
    log::info(line);
  }
  t = nn::CheckpointTimes{};
}

void EngineLayerRunner::check_host_room(const at::Tensor& x) {
  const int64_t bytes = x.numel() * static_cast<int64_t>(x.element_size());
  const int64_t held = (bytes + nn::kHostPieceBytes - 1) / nn::kHostPieceBytes * nn::kHostPieceBytes;
  if (held <= host_block_bytes_) return;
  HostCheckpointNeed need;
  need.blocks = host_blocks_;
  // After the first check the earlier inputs' pinned blocks are held (cached): only the growth is new.
  need.bytes_per_block = held;
  need.held_per_block = host_block_bytes_;
  need.tokens = x.dim() > 0 && x.size(-1) > 0 ? x.numel() / x.size(-1) : 0;
  need.local_ranks = local_ranks_;
  need.available = host_memory_available();
  if (const std::string short_of = host_checkpoint_shortfall(need); !short_of.empty()) throw Error(short_of);
  host_block_bytes_ = held;
}

at::Tensor EngineLayerRunner::run_layer(size_t index, nn::StackLayer& layer, const at::Tensor& x) {
  if (gatherer_) gatherer_->before_forward(index);
  const bool grad_mode = c10::GradMode::is_enabled();
  const bool frozen_here = frozen_ && frozen_->holds(index);
  if (frozen_) frozen_->before_forward(index);
  const bool checkpointed = index < checkpointed_.size() && checkpointed_[index];
  // The frozen base is read until the input's gradient is complete (or, when
  // the input takes none, until the backward pass ends: the core releases it).
  const bool input_grad = grad_mode && x.requires_grad();
  const at::Tensor in = frozen_here && input_grad ? AfterLayerBackward::apply(x, frozen_, index) : x;
  at::Tensor y;
  if (checkpointed) {
    if (index == first_checkpointed_ && grad_mode) {
      report_profile();
      if (contiguous_) contiguous_->begin_forward();
      if (contiguous_host_) contiguous_host_->begin_forward();
    }
    // Only a CUDA input goes down to pinned memory (a CPU one is kept as is).
    if (host_checkpointed_[index] && grad_mode && in.is_cuda() && in.requires_grad()) check_host_room(in);
    nn::StackLayer* l = &layer;  // the stack owns its layers for as long as the graph can run
    y = nn::checkpoint([l](const at::Tensor& v) { return l->forward(v); }, in,
                       host_checkpointed_[index] ? host_options_ : options_);
  } else {
    y = layer.forward(in);
  }
  const bool backward_follows = grad_mode && y.requires_grad();
  if (frozen_here) frozen_->after_forward(index, backward_follows);
  if (gatherer_) gatherer_->after_forward(index, backward_follows);
  if (!backward_follows || (!gatherer_ && !frozen_here)) return y;
  return BeforeLayerBackward::apply(y, gatherer_, frozen_here ? frozen_ : nullptr, index);
}

std::vector<bool> checkpointed_layers(const nn::LayerStackImpl& stack, const config::ActivationCheckpointingConfig& ac) {
  std::vector<bool> out(stack.size(), false);
  if (!ac.enabled || stack.size() == 0) return out;
  std::map<std::string, int64_t> count;
  for (size_t i = 0; i < stack.size(); ++i) ++count[stack.layer(i).name()];
  std::string kind;
  int64_t most = 0;
  for (const auto& [k, n] : count)
    if (n > most) kind = k, most = n;
  int64_t left = ac.number_checkpoints.value_or(most);
  for (size_t i = 0; i < stack.size() && left > 0; ++i)
    if (stack.layer(i).name() == kind) out[i] = true, --left;
  return out;
}

std::vector<bool> host_checkpointed_layers(const std::vector<bool>& checkpointed,
                                           const config::ActivationCheckpointingConfig& ac) {
  std::vector<bool> out(checkpointed.size(), false);
  if (!ac.cpu_checkpointing) return out;
  int64_t left = ac.cpu_checkpointing_layers.value_or(static_cast<int64_t>(checkpointed.size()));
  for (size_t i = 0; i < checkpointed.size() && left > 0; ++i)
    if (checkpointed[i]) out[i] = true, --left;
  return out;
}

zero::LayerParams layer_params(const nn::LayerStackImpl& stack, const std::vector<at::Tensor>& params) {
  std::unordered_map<const void*, int> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  zero::LayerParams out;
  for (size_t l = 0; l < stack.size(); ++l) {
    std::vector<int> own, borrowed;
    for (const auto& p : stack.layer(l).parameters(/*recurse=*/true))
      if (auto it = index.find(p.unsafeGetTensorImpl()); it != index.end()) own.push_back(it->second);
    // A frozen borrowed parameter is not partitioned (it stays whole on the device): nothing to gather.
    for (const auto& p : stack.layer(l).borrowed_parameters())
      if (auto it = index.find(p.unsafeGetTensorImpl()); it != index.end()) borrowed.push_back(it->second);
    if (stack.layer(l).linear_weights_fusable()) out.fusable.insert(out.fusable.end(), own.begin(), own.end());
    out.own.push_back(std::move(own));
    out.borrowed.push_back(std::move(borrowed));
    for (const auto& p : stack.layer(l).row_gradient_parameters())
      if (auto it = index.find(p.unsafeGetTensorImpl()); it != index.end()) out.row_fed.push_back(it->second);
  }
  return out;
}

}  // namespace stratum
