#pragma once
// The gradient norm that clipping needs, computed bucket by bucket on a side
// stream as each reduction of the accumulation window's last micro-step
// completes, so that it overlaps the rest of backward instead of reading every
// gradient again at the step (5.3 GB of fp32 gradients a GPU on gpt2-1.3b at
// ZeRO-0: 1.5 ms). Only where a reduction's result is the final gradient, in
// place: NCCL's average with no pre/post scaling and nothing accumulated or
// rounded after it. Any other final reduction in the window (gradient
// accumulation at stages 2/3, predivide factors, stage 3's 16-bit gradient
// shard, one region reduced twice) voids it and the engine computes the norm
// itself. On the CPU (no streams) the pieces are kept and their norms taken
// at the step, after the reductions were waited for: no overlap, the same
// bookkeeping (so it is tested without a GPU). Internal to zero/.
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include "stratum/distributed/communicator.h"

namespace stratum::zero {

class ReducedGradNorm {
 public:
  // Room for `capacity` pieces a window (a piece per bucket).
  ReducedGradNorm(c10::Device device, int64_t capacity);
  // The current stream waits for the norms still running (they read gradients).
  ~ReducedGradNorm();

  // `reduced` holds its final gradient once `work` completes (null: once the
  // current stream's work so far is done): its norm is queued on the side
  // stream behind it (CUDA) or taken at the step (CPU).
  void add(const distributed::WorkPtr& work, const at::Tensor& reduced);
  // A final reduction whose result is not the gradient as it lands.
  void invalidate() { valid_ = false; }
  // A piece already added was changed on the current stream (rows added to a
  // tied embedding's reduced head part): its norm is taken again after.
  void renorm(const at::Tensor& piece);
  // The window's sum of squares when the pieces added cover `expected_numel`
  // elements (every segment's gradient) and nothing voided it, else
  // undefined. The current stream then waits for the side stream. Starts a
  // new window either way.
  at::Tensor take(int64_t expected_numel);
  // Before gradients are rewritten (a new window, a skipped step): the
  // current stream waits for the norms in flight; a new window starts.
  void reset();

 private:
  void join();

  c10::Device device_;
  std::optional<c10::Stream> side_;  // CUDA: one of the device's pool streams
  at::Tensor norms_;  // [capacity] fp32: the 2-norm of each piece
  std::vector<at::Tensor> deferred_;  // CPU: the pieces, normed in take()
  std::vector<at::Tensor> pieces_;    // CUDA: the pieces added, by slot (for renorm)
  int64_t count_ = 0, numel_ = 0;
  bool valid_ = true;
  std::optional<c10::Event> done_;  // the side stream's last norm
};

}  // namespace stratum::zero
