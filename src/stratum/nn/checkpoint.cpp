#include "stratum/nn/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"

namespace stratum::nn {
namespace {

using Fn = std::function<at::Tensor(const at::Tensor&)>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The generators fn may draw from: the CPU one and, for a CUDA input, its device's.
std::vector<at::Generator> generators_for(const at::Device& device) {
  std::vector<at::Generator> gens{at::globalContext().defaultGenerator(at::kCPU)};
  if (device.is_cuda()) gens.push_back(at::globalContext().defaultGenerator(device));
  return gens;
}

// Under the generator's mutex, as torch.get_rng_state / set_rng_state do.
std::vector<at::Tensor> get_states(std::vector<at::Generator>& gens) {
  std::vector<at::Tensor> states;
  for (auto& g : gens) {
    std::lock_guard<std::mutex> lock(g.mutex());
    states.push_back(g.get_state());
  }
  return states;
}

void set_states(std::vector<at::Generator>& gens, const std::vector<at::Tensor>& states) {
  for (size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    gens[i].set_state(states[i]);
  }
}

// Puts the generators back as they were at construction, also when fn throws,
// so the recomputation does not shift the caller's random stream.
class RngRestore {
 public:
  explicit RngRestore(std::vector<at::Generator>& gens) : gens_(gens), states_(get_states(gens)) {}
  ~RngRestore() { set_states(gens_, states_); }
  RngRestore(const RngRestore&) = delete;
  RngRestore& operator=(const RngRestore&) = delete;

 private:
  std::vector<at::Generator>& gens_;
  std::vector<at::Tensor> states_;
};

// The whole input in one pinned block (for contiguous_memory_optimization's
// store, which copies it into its own buffer).
at::Tensor to_host(const at::Tensor& x) {
  if (!x.is_cuda()) return x.to(at::kCPU);
  // Pinned, so the copy is asynchronous; later work on the stream is ordered after it.
  at::Tensor host = at::empty(x.sizes(), x.options().device(at::kCPU).pinned_memory(true));
  host.copy_(x, /*non_blocking=*/true);
  return host;
}

void synchronize(const at::Device& device) {
  if (device.is_cpu()) return;
  c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
}

// Seconds from construction to seconds(), the device synchronized at both ends.
class SyncedTimer {
 public:
  explicit SyncedTimer(const at::Device& device) : device_(device) {
    synchronize(device_);
    start_ = std::chrono::steady_clock::now();
  }
  double seconds() const {
    synchronize(device_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  at::Device device_;
  std::chrono::steady_clock::time_point start_;
};

// Everything backward needs besides the saved input; IValues hold it as a capsule.
struct State : torch::CustomClassHolder {
  Fn fn;
  at::Device device{at::kCPU};
  bool offloaded = false;
  bool synchronize = false;
  std::shared_ptr<CheckpointTimes> profile;
  std::vector<at::Tensor> rng_states;
  std::vector<int64_t> in_sizes, out_sizes;
  bool in_pieces = false;  // the saved input is to_host_pieces' pieces
};

at::Tensor run_fn(const Fn& fn, const at::Tensor& x, const char* phase) {
  at::Tensor out = fn(x);
  if (!out.defined())
    throw Error(std::string("checkpoint: fn returned an undefined tensor (") + phase + ")");
  return out;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Function::apply runs this under no-grad: fn's graph (and its activations) is not kept.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Fn& fn, const CheckpointOptions* o) {
    auto state = c10::make_intrusive<State>();
    state->fn = fn;  // a copy: the caller's fn may be gone by backward
    state->device = x.device();
    state->offloaded = o->offload_input;
    state->synchronize = o->synchronize;
    state->profile = o->profile;
    if (o->synchronize) synchronize(x.device());
    std::optional<SyncedTimer> timer;
    if (o->profile) timer.emplace(x.device());
    auto gens = generators_for(x.device());
    state->rng_states = get_states(gens);
    at::Tensor out = run_fn(fn, x, "forward");
    state->out_sizes = out.sizes().vec();
    // Saving x itself (not offloaded or stored) lets autograd catch in-place changes to it before backward.
    state->in_sizes = x.sizes().vec();
    if (o->offload_input && x.is_cuda() && !o->store) {
      state->in_pieces = true;
      ctx->save_for_backward(to_host_pieces(x));
    } else {
      at::Tensor saved = o->offload_input ? to_host(x) : x;
      if (o->store) saved = o->store(saved);
      ctx->save_for_backward({saved});
    }
    ctx->saved_data["state"] = at::IValue::make_capsule(std::move(state));
    if (timer) {
      o->profile->forward_s += timer->seconds();
      ++o->profile->forwards;
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data.at("state").toCapsule();
    const State& s = *static_cast<const State*>(holder.get());
    if (s.synchronize) synchronize(s.device);
    std::optional<SyncedTimer> timer;
    if (s.profile) timer.emplace(s.device);
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor x = s.in_pieces ? from_host_pieces(saved, s.in_sizes, s.device) : saved.at(0);
    if (s.offloaded && !s.in_pieces) x = x.to(s.device);
    x = x.detach().requires_grad_(true);
    at::Tensor out;
    {
      auto gens = generators_for(s.device);
      RngRestore keep_caller_stream(gens);
      set_states(gens, s.rng_states);  // the forward's dropout masks again
      c10::AutoGradMode enable(true);
      out = run_fn(s.fn, x, "recomputation in backward");
    }
    if (out.sizes().vec() != s.out_sizes)
      throw Error("checkpoint: fn returned shape " + c10::str(out.sizes()) + " in the backward recomputation but " +
                  c10::str(at::IntArrayRef(s.out_sizes)) + " in forward; fn must compute the same function both times");
    if (!out.requires_grad())
      throw Error("checkpoint: fn's output does not require grad when recomputed with grad enabled; "
                  "it must depend on its input (differentiably) or on a parameter requiring grad");
    double recompute_s = 0;
    if (timer) recompute_s = timer->seconds();
    torch::autograd::backward({out}, {grads.at(0)});
    if (timer) {
      s.profile->recompute_s += recompute_s;
      s.profile->backward_s += timer->seconds() - recompute_s;
      ++s.profile->recomputes;
    }
    return {x.grad(), at::Tensor(), at::Tensor()};  // one per forward argument: x, fn, options
  }
};

}  // namespace

at::Tensor checkpoint(const Fn& fn, const at::Tensor& x, const CheckpointOptions& options) {
  if (!fn) throw Error("checkpoint: fn is empty");
  if (!x.defined()) throw Error("checkpoint: the input is an undefined tensor");
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return run_fn(fn, x, "forward");
  return CheckpointFunction::apply(x, fn, &options);
}

std::vector<at::Tensor> to_host_pieces(const at::Tensor& x, int64_t piece_bytes) {
  if (piece_bytes < static_cast<int64_t>(x.element_size()))
    throw Error("to_host_pieces: a piece of " + std::to_string(piece_bytes) + " bytes holds no element");
  const at::Tensor flat = x.contiguous().view(-1);
  const int64_t per_piece = piece_bytes / static_cast<int64_t>(x.element_size()), n = flat.numel();
  const at::TensorOptions host = x.options().device(at::kCPU).pinned_memory(x.is_cuda());
  std::vector<at::Tensor> pieces;
  for (int64_t offset = 0; offset < n; offset += per_piece) {
    const int64_t len = std::min(per_piece, n - offset);
    pieces.push_back(at::empty({len}, host));
    pieces.back().copy_(flat.narrow(0, offset, len), /*non_blocking=*/x.is_cuda());
  }
  return pieces;
}

at::Tensor from_host_pieces(const std::vector<at::Tensor>& pieces, at::IntArrayRef sizes, const at::Device& device) {
  int64_t total = 0;
  for (const at::Tensor& p : pieces) total += p.numel();
  if (pieces.empty() || total != c10::multiply_integers(sizes))
    throw Error("from_host_pieces: " + std::to_string(pieces.size()) + " pieces of " + std::to_string(total) +
                " elements do not hold the shape " + c10::str(sizes));
  at::Tensor x = at::empty(sizes, pieces.front().options().pinned_memory(false).device(device));
  at::Tensor flat = x.view(-1);
  int64_t offset = 0;
  for (const at::Tensor& p : pieces) {
    flat.narrow(0, offset, p.numel()).copy_(p, /*non_blocking=*/p.is_pinned());
    offset += p.numel();
  }
  return x;
}

at::Tensor checkpoint(const Fn& fn, const at::Tensor& x, bool offload_input) {
  CheckpointOptions options;
  options.offload_input = offload_input;
  return checkpoint(fn, x, options);
}

}  // namespace stratum::nn
