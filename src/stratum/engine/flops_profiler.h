#pragma once
// DeepSpeed's flops profiler (the flops_profiler section) for the engine: at
// optimizer step `profile_step` every forward pass of that step is observed
// and, at the end of the step's optimizer update, rank 0 prints (or writes to
// output_file) DeepSpeed's "DeepSpeed Flops Profiler" block: the summary
// (sizes, params, fwd MACs and flops, fwd/bwd/step latencies and FLOPS,
// samples/second), "Aggregated Profile per GPU" (the top_modules modules by
// params, MACs and fwd latency at each depth up to module_depth) and, with
// `detailed`, "Detailed Profile per GPU" (the module tree).
//
// How it counts: DeepSpeed patches torch.nn.functional in Python; here an
// ATen RecordFunction callback (thread-local, with the ops' inputs) sees
// every op the forward dispatches and costs the matrix products from their
// input shapes (op_cost below). Only the outermost costed op counts: at::linear
// calling addmm, matmul calling mm, or SDPA calling its flash/math kernel
// are counted once. Stratum's own GEMM that cuBLASLt runs without ATen
// (GPT-2's MLP GEMM with its GELU epilogue) records itself as
// "stratum::linear_bias_gelu". Elementwise ops (norms, activations, adds,
// softmax, the loss) are not counted (DeepSpeed counts them, at 1 to 5 flops
// an element: well under 1% of a transformer's flops).
//
// Modules: the model at depth 0 and, for a LayerStack model, its layers at
// depth 1, named `layers.<i>` after their place in the stack, with their
// class (GPT2Block, ...) and parameter prefix. LayerStack::run emits a user
// scope around each layer (free when no callback is installed); the profiler
// synchronizes the device at each layer's start and end (as DeepSpeed's
// module hooks do) to time it, so the profiled step is slower than the others.
//
// Figures cover all micro-batches of the profiled step, summed (DeepSpeed's
// flops are those of the step's last forward pass while its latencies sum
// the step's; at gradient_accumulation_steps 1 the two agree).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "stratum/config/sections.h"

namespace torch::nn {
class Module;
}

namespace stratum {

namespace nn {
class LayerStackImpl;
}

// The modules a profile attributes to.
struct ProfiledModule {
  std::string name;   // "layers.3" ("" for the model)
  std::string kind;   // its class: "GPT2Block", "GPT2LMHeadModel"
  std::string where;  // a layer's parameter prefix ("transformer.h.2"), shown after its figures
  std::string scope;  // the user scope LayerStack::run emits around the layer (LayerStackImpl::layer_scope)
  int64_t params = 0;  // its own parameters, counted before ZeRO-3 partitions them
};
struct ModelOutline {
  ProfiledModule model;                // params: every parameter of the model, once
  std::vector<ProfiledModule> layers;  // a LayerStack's, in order; empty for another module
};

// What a module's profiled forward passes added up to.
struct ModuleProfile {
  int64_t macs = 0;
  int64_t flops = 0;
  double seconds = 0;  // between device synchronizes at its start and end
};

// The multiply-accumulates and flops of one op from its name and inputs, as
// DeepSpeed's profiler costs them: mm/bmm/matmul/linear 2 flops a MAC,
// addmm/baddbmm/addmv plus their added input's elements, SDPA (every
// variant) 4·b·h·s_q·s_k·d flops — a causal mask is not discounted, as
// neither DeepSpeed's nor torch.utils.flop_counter's count discounts it.
// nullopt: an op that is not costed (elementwise ones, views, ...).
struct OpCost {
  int64_t macs = 0;
  int64_t flops = 0;
};
bool is_costed_op(std::string_view name);
std::optional<OpCost> op_cost(std::string_view name, c10::ArrayRef<const c10::IValue> inputs);

// The outline of `module` (a LayerStack's layers when `stack` is it).
ModelOutline model_outline(const torch::nn::Module& module, const nn::LayerStackImpl* stack);

class FlopsProfiler {
 public:
  FlopsProfiler(const config::FlopsProfilerConfig& config, ModelOutline outline, c10::Device device);
  ~FlopsProfiler();
  FlopsProfiler(const FlopsProfiler&) = delete;
  FlopsProfiler& operator=(const FlopsProfiler&) = delete;

  const config::FlopsProfilerConfig& config() const { return config_; }
  const ModelOutline& outline() const { return outline_; }

  // Around one forward pass, on the thread that runs it: installs the
  // observer (synchronizing the device first) and takes it off again.
  // cancel() takes it off after a forward that threw, keeping what was counted.
  void start();
  void stop();
  void cancel();
  bool running() const { return handle_ != 0; }

  // Counted since the last reset().
  const ModuleProfile& model() const { return model_; }
  const std::vector<ModuleProfile>& layers() const { return layers_; }
  int64_t forward_passes() const { return passes_; }
  void reset();

  // The step's context the summary prints.
  struct StepFacts {
    int64_t profile_step = 0;
    int64_t world_size = 1, dp_size = 1, mp_size = 1;
    int64_t micro_batch = 1, gradient_accumulation_steps = 1;
    double fwd_seconds = 0, bwd_seconds = 0, step_seconds = 0;  // the profiled step's, summed over micro-steps
  };
  // DeepSpeed's block, every line ending in '\n'.
  std::string report(const StepFacts& facts) const;

  // The observer's (RecordFunction callbacks): what it counted, and where.
  struct State;
  c10::Device device() const { return device_; }
  void add_cost(const OpCost& cost, int64_t layer);  // layer -1: outside every layer
  void add_layer_time(size_t layer, double seconds);

 private:
  config::FlopsProfilerConfig config_;
  ModelOutline outline_;
  c10::Device device_;
  ModuleProfile model_;
  std::vector<ModuleProfile> layers_;
  int64_t passes_ = 0;
  uint64_t handle_ = 0;  // at::CallbackHandle while running
  std::unique_ptr<State> state_;
};

// DeepSpeed's number formats (profiler.py's number_to_string & co.): the
// value scaled to T/G/M/K/(none)/m/u, rounded to 2 decimals, printed as %g.
std::string profile_number(double value);          // "1.23 M", "0 "
std::string profile_params(double value);          // "1.23 M", "1.5 B" (no trailing space)
std::string profile_macs(double value);            // "1.23 GMACs"
std::string profile_flops(double value);           // "1.23 TFLOPS"
std::string profile_duration(double seconds);      // "12.5 ms"

}  // namespace stratum
