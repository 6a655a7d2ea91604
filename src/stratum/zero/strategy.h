#pragma once
// One interface for ZeRO stages 0 to 3 (zero_stage{0,1,2,3}.cpp). A
// strategy owns the model's flat parameter buffer, the gradients and the fp32
// master weights; it reduces gradients over the data-parallel group as
// backward produces them, and after the optimizer puts the new weights back
// into the model. The engine owns the optimizer states and the step logic.
//
// Per-rank model-state bytes, Ψ parameters, N data-parallel ranks:
//                 16-bit params (bf16/fp16)      fp32 params
//   stage 0       2Ψ + GΨ + 12Ψ                   4Ψ + 4Ψ + 8Ψ     = 16Ψ (master = params)
//   stage 1       2Ψ + GΨ + 12Ψ/N                 4Ψ + 4Ψ + 12Ψ/N
//   stage 2       2Ψ + (G + 12)Ψ/N                4Ψ + 16Ψ/N
//   stage 3       16Ψ/N (+ gathered layers)       16Ψ/N (master = params shard)
// (params + grads + fp32 master/Adam m/Adam v), within bucket padding. G, the
// gradient bytes at stages 0-2: those of the wire (communication_data_type,
// fp32 by default: 4) when N > 1, 2 at N = 1.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"
#include "stratum/zero/flat_layout.h"
#include "stratum/zero/float8_unit_gather.h"

namespace stratum::zero {

struct ZeroOptions {
  int stage = 0;
  int64_t bucket_elems = 500'000'000;  // reduce_bucket_size
  bool overlap_comm = false;           // reduce buckets during backward
  bool reduce_scatter = true;          // stages 1/2: reduce-scatter (else all-reduce, keep the slice)
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  at::ScalarType comm_dtype = at::kFloat;  // gradients travel in this dtype
  // data_types.grad_accum_dtype "fp32": gradients accumulate in fp32 at every
  // DP size (else in the wider of model and wire dtypes over several ranks, in
  // the model's on one).
  bool grad_accum_fp32 = false;
  // offload_optimizer (stages 1-3): fp32 masters (and the engine's Adam states)
  // in host memory, pinned when the model is on a GPU and pin_memory is set.
  bool offload_optimizer = false;
  // offload_param (stage 3): the 16-bit parameter shard in host memory too.
  bool offload_param = false;
  // Stage 3 over a model born sharded (parameters unmaterialized,
  // nn/deferred_init.h): parameter p's whole initial value, in the model dtype
  // on the device. Data-parallel rank 0 draws a unit's parameters when the
  // unit is partitioned and broadcasts them, so no rank ever holds more than
  // its shard and one whole layer.
  std::function<at::Tensor(int)> initial_value;
  bool pin_memory = true;
  // The engine's optimizer writes each segment's updated parameters, rounded to
  // the model dtype, into segment.params16 on the device (optim::adam_step_mixed):
  // stage 0 points it at the model's flat buffer, stages 1/2 at this rank's
  // slice of each bucket of it (the all-gather then runs in place) and stage 3
  // at its 16-bit shard, so publishing them needs no cast.
  bool device_params16 = false;
  // Stages 1/2 with a LayerStack model: the parameter all-gathers after the
  // step are waited for by the layers that read them in the next forward
  // (Megatron's overlap_param_gather) instead of at the end of step().
  bool overlap_param_gather = false;
  // Stages 0-2 over several ranks: parameters whose gradient comes only from
  // nn::embedding_lookup (LayerParams::row_fed). Each gets a bucket of its own
  // that is not reduced: the looked-up rows' gradients are all-gathered at the
  // accumulation boundary and summed into it (nn/embedding.h).
  std::vector<int> row_gradient_params;
  // Of those, the ones that also get a dense gradient (read by a tied LM
  // head): their bucket is reduced as usual and the rows are added after.
  std::vector<int> row_dense_params;
  // A LayerStack model at any stage (zero_optimization.gradient_accumulation_fusion):
  // nn::linear writes weight gradients straight into the flat gradient (nn/linear.h).
  bool fuse_weight_grads = false;
  // The parameters it applies to: LayerParams::fusable less any parameter
  // another layer borrows (a tied embedding, whose lookup adds to its gradient).
  std::vector<int> fused_params;
  c10::Device device = c10::kCPU;  // stage 3: where the model trains (its parameters may still be on the host)
  // Stage 3 (DeepSpeed's stage3_* keys, in elements).
  int64_t prefetch_elems = 50'000'000;
  int64_t persistence_threshold = 100'000;
  int64_t max_live_elems = 1'000'000'000;
  int64_t max_reuse_distance = 1'000'000'000;
  // Stages 2 and 3 under a zero-bubble pipeline (pipeline.schedule "zb-h1"):
  // weight gradients arrive in W, after their micro-batch's backward, so the
  // window's gradients are staged whole and reduced once, when it closes
  // (ZeRO-1's gradient memory, as torchtitan's pipeline x FSDP holds them);
  // parameters and optimizer states stay partitioned, and a stage-3 layer is
  // still released at the end of its B (W reads no weight).
  bool reduce_at_window_end = false;
};

// Stage 3 needs the model as layers: which trainable parameters (indices into
// the list given to the strategy) each layer of a LayerStack owns and borrows.
struct LayerParams {
  std::vector<std::vector<int>> own;
  std::vector<std::vector<int>> borrowed;
  std::vector<int> row_fed;  // StackLayer::row_gradient_parameters of every layer
  std::vector<int> fusable;  // own parameters of layers with StackLayer::linear_weights_fusable
};

// What the layer runner calls around each layer at stage 3.
class LayerParamGatherer {
 public:
  virtual ~LayerParamGatherer() = default;
  // Gathers the layer's parameters (waiting for a prefetch in flight) and
  // starts gathering the next layers' while less than
  // stage3_prefetch_bucket_size elements are in flight (DeepSpeed's rule).
  virtual void before_forward(size_t layer) = 0;
  // Releases what will not be reused soon; `backward_follows`: the layer's
  // output is part of a graph that backward will run through.
  virtual void after_forward(size_t layer, bool backward_follows) = 0;
  // Before the layer's backward (autograd's thread): gathers again, prefetches
  // the layers before it. Its gradients are reduce-scattered, and the layer
  // released, as soon as autograd has accumulated them.
  virtual void before_backward(size_t layer) = 0;
  virtual int64_t live_elems() const = 0;       // gathered now (persistent parameters not counted)
  virtual int64_t gathered_bytes() const { return 0; }  // all-gathered for the layers so far
  virtual int64_t peak_live_elems() const = 0;  // since construction
};

// The fp32 weights this rank updates and their gradients, in matching pieces.
struct OptimizerSegment {
  at::Tensor master;  // fp32 (on the host with offload_optimizer)
  at::Tensor grad;    // model dtype, on the device (averaged over data parallel after wait_gradients)
  // offload_optimizer with 16-bit training: host buffer the CPU Adam writes the
  // updated parameters into, rounded to the model dtype, in the same pass;
  // publish_params() sends these to the device (half the bytes of the masters).
  at::Tensor params16;
};

struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t master = 0;
  int64_t total() const { return params + grads + master; }
};

class ZeroStrategy {
 public:
  virtual ~ZeroStrategy() = default;
  virtual int stage() const = 0;

  // Before a micro-step's backward; `boundary`: last micro-step of the accumulation window.
  virtual void prepare_backward(bool boundary) = 0;
  // After loss.backward() returned: starts the reductions backward did not.
  virtual void finish_backward() = 0;
  // At the boundary: waits for every reduction; segments' grads are then final.
  virtual void wait_gradients() = 0;
  // After wait_gradients(): the sum of squares of the segments' gradients when
  // the reductions computed it as they completed (reduced_grad_norm.h), else
  // undefined and the caller computes it. Partitioned: this rank's part.
  virtual at::Tensor reduced_grad_sq_norm() { return at::Tensor(); }
  virtual std::vector<OptimizerSegment>& segments() = 0;
  // True when segments hold only this rank's part (norms and overflow need a DP reduction).
  virtual bool partitioned() const = 0;
  // After the optimizer: the model's parameters take the updated masters
  // (collective at stages 1/2; see overlap_param_gather for when they are final).
  virtual void publish_params() = 0;
  virtual void zero_gradients() = 0;
  virtual ModelStateBytes bytes() const = 0;
  virtual const FlatLayout& layout() const = 0;
  // Which flat ranges this rank's segments hold (stage 0: all of it).
  virtual std::vector<FlatPiece> owned_pieces() const = 0;
  // What the layer runner calls around each layer: stage 3's gatherer, and
  // stages 1/2's waits with overlap_param_gather; nullptr otherwise.
  virtual LayerParamGatherer* gatherer() { return nullptr; }
  // Stage 3: the layers whose parameters are all these FP8 projections'
  // weights are gathered as FP8 bytes from now on (zero/float8_unit_gather.h;
  // collective over data parallelism: the scales). Other stages gather no
  // layer: nothing to do.
  virtual Float8GatherReport gather_in_float8(std::vector<Float8GatherGroup> groups) {
    (void)groups;
    return {};
  }
  // After the optimizer updated segment i (the engine goes from the last
  // segment to the first, the next forward's order): stages 1/2 start
  // all-gathering its bucket, so the rest of the optimizer overlaps it.
  virtual void segment_updated(size_t segment) { (void)segment; }
  // The parameters are final on the current stream (publish_params with
  // overlap_param_gather leaves the waits to the next forward).
  virtual void wait_params() {}
  // Calls fn(index, value) for every parameter with its whole value in the model
  // dtype (collective at stage 3, which gathers one layer at a time).
  virtual void for_each_full_param(const std::function<void(int, const at::Tensor&)>& fn) = 0;
  // The trainable parameters that no backward reached since forget_reached()
  // (zero_optimization.ignore_unused_parameters false makes that an error).
  virtual std::vector<std::string> parameters_without_gradient() const = 0;
  virtual void forget_reached() = 0;
};

// `params`: the module's trainable parameters (leaf variables) in registration
// order; their data is moved into the flat buffer (same tensors: autograd and
// user references stay valid) in `model_dtype` on their device. Collective over
// `dp` (rank 0's initial weights are broadcast).
// `layers` (a LayerStack model's, may be null): stages 1/2 use it for
// overlap_param_gather, which without it waits in publish_params().
std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroOptions& options, std::vector<at::Tensor> params,
                                                 std::vector<std::string> names, at::ScalarType model_dtype,
                                                 std::shared_ptr<distributed::Communicator> dp,
                                                 const LayerParams* layers = nullptr);

// Stage 3. `params` may be anywhere (the CPU module as built); each layer's are
// moved to `device` one layer at a time, rank 0's values broadcast, and only
// this rank's slice kept: the whole model never sits on one device.
std::unique_ptr<ZeroStrategy> make_stage3(const ZeroOptions& options, const LayerParams& layers,
                                          std::vector<at::Tensor> params, std::vector<std::string> names,
                                          at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp,
                                          c10::Device device);

}  // namespace stratum::zero
