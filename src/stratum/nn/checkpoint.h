#pragma once
// Activation checkpointing for one tensor -> tensor function (a layer), as
// torch.utils.checkpoint(use_reentrant=True) / DeepSpeed's checkpoint():
// trade a second forward in backward for not keeping the layer's activations.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace stratum::nn {

// Runs fn(x) without keeping fn's intermediate activations: forward runs under
// no-grad and saves only x (on the host when offload_input is true: DeepSpeed's
// cpu_checkpointing) and the RNG states (CPU generator and, when x is on a CUDA
// device, that device's generator). Backward restores those RNG states (so
// dropout draws the same masks), recomputes fn(x) with grad enabled and
// backpropagates the incoming gradient through the recomputation (a nested,
// reentrant backward): parameters used by fn get their .grad accumulated (their
// post-accumulate-grad hooks fire during that nested backward), the gradient
// for x is returned, and the caller's RNG streams are left as they were.
// When grad mode is off or x does not require grad, it is plain fn(x).
// fn is copied and kept until backward; it must compute the same function in
// both runs (same parameters, same training flag).
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x,
                      bool offload_input = false);

// Seconds spent in checkpointed layers, device-synchronized (CheckpointOptions::profile).
struct CheckpointTimes {
  int64_t forwards = 0, recomputes = 0;
  double forward_s = 0, recompute_s = 0, backward_s = 0;
};

// DeepSpeed's activation_checkpointing options, beyond offload_input.
struct CheckpointOptions {
  bool offload_input = false;
  // Where the saved input goes: store(x) returns the tensor to keep (a copy of
  // x in a preallocated buffer: contiguous_memory_optimization). Applied after
  // the offload to the host, so it receives the host copy then.
  std::function<at::Tensor(const at::Tensor&)> store;
  // A device synchronize before the forward and before the recomputation.
  bool synchronize = false;
  // Adds this call's forward, recomputation and backward seconds (with a
  // device synchronize around each) to *profile.
  std::shared_ptr<CheckpointTimes> profile;
};
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x,
                      const CheckpointOptions& options);

// cpu_checkpointing's copy of a layer input in host memory. Pinned host
// memory comes from the caching host allocator, which rounds each block up
// to a power of two: a 1.125 GiB input (llama-8b at 144K tokens) would hold
// 2 GiB of pinned memory, and 32 of them pass the host's RAM. So the input
// goes down in pieces of at most `piece_bytes` (a power of two), pinned when
// x is on a CUDA device: a copy holds less than one piece beyond its size.
constexpr int64_t kHostPieceBytes = int64_t{64} << 20;
std::vector<at::Tensor> to_host_pieces(const at::Tensor& x, int64_t piece_bytes = kHostPieceBytes);
// The pieces joined again on `device` (a CUDA copy is asynchronous: later
// work on the stream is ordered after it), shaped `sizes`.
at::Tensor from_host_pieces(const std::vector<at::Tensor>& pieces, at::IntArrayRef sizes, const at::Device& device);

}  // namespace stratum::nn
