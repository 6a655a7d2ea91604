#pragma once
// One interface for ZeRO stages 0, 1 and 2 (zero_stage{0,1,2}.cpp). A
// strategy owns the model's flat parameter buffer, the gradients and the fp32
// master weights; it reduces gradients over the data-parallel group as
// backward produces them, and after the optimizer puts the new weights back
// into the model. The engine owns the optimizer states and the step logic.
//
// Per-rank model-state bytes, Ψ parameters, N data-parallel ranks:
//                 16-bit params (bf16/fp16)      fp32 params
//   stage 0       2Ψ + 2Ψ + 12Ψ   = 16Ψ           4Ψ + 4Ψ + 8Ψ     = 16Ψ (master = params)
//   stage 1       2Ψ + 2Ψ + 12Ψ/N                 4Ψ + 4Ψ + 12Ψ/N
//   stage 2       2Ψ + 14Ψ/N                      4Ψ + 16Ψ/N
// (params + grads + fp32 master/Adam m/Adam v), within bucket padding.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/dist/communicator.h"
#include "stratum/zero/flat_layout.h"

namespace stratum::zero {

struct ZeroOptions {
  int stage = 0;
  int64_t bucket_elems = 500'000'000;  // reduce_bucket_size
  bool overlap_comm = false;           // reduce buckets during backward
  bool reduce_scatter = true;          // stages 1/2: reduce-scatter (else all-reduce, keep the slice)
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  at::ScalarType comm_dtype = at::kFloat;  // gradients travel in this dtype
};

// The fp32 weights this rank updates and their gradients, in matching pieces.
struct OptimizerSegment {
  at::Tensor master;  // fp32
  at::Tensor grad;    // model dtype (averaged over data parallel after wait_gradients)
};

// A run of the flat buffer that this rank's optimizer segment `segment` holds
// from `segment_offset` on: how checkpoints map shards back to parameters.
struct FlatPiece {
  int64_t flat_offset = 0;
  int64_t numel = 0;
  int segment = 0;
  int64_t segment_offset = 0;
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
  virtual std::vector<OptimizerSegment>& segments() = 0;
  // True when segments hold only this rank's part (norms and overflow need a DP reduction).
  virtual bool partitioned() const = 0;
  // After the optimizer: the model's parameters take the updated masters.
  virtual void publish_params() = 0;
  virtual void zero_gradients() = 0;
  virtual ModelStateBytes bytes() const = 0;
  virtual const FlatLayout& layout() const = 0;
  // Which flat ranges this rank's segments hold (stage 0: all of it).
  virtual std::vector<FlatPiece> owned_pieces() const = 0;
};

// `params`: the module's trainable parameters (leaf variables) in registration
// order; their data is moved into the flat buffer (same tensors: autograd and
// user references stay valid) in `model_dtype` on their device. Collective over
// `dp` (rank 0's initial weights are broadcast).
std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroOptions& options, std::vector<at::Tensor> params,
                                                 std::vector<std::string> names, at::ScalarType model_dtype,
                                                 std::shared_ptr<dist::Communicator> dp);

}  // namespace stratum::zero
