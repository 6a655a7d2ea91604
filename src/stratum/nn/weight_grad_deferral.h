#pragma once
// The split backward of zero-bubble pipeline schedules (ZB-H1, Qi et al.,
// ICLR 2024): B, the input gradient, runs now, on the critical path; W, the
// weight gradients, later, in the pipeline's bubble.
//
// While a DeferWeightGrads scope is open, every weight-gradient GEMM that
// nn::linear, linear_stacked, the fused MLPs and the FP8 projections
// (nn/float8/float8_linear.h, their FP8 operands kept) would write into a
// WeightGradSink (nn/linear.h: ZeRO's flat gradients, under
// zero_optimization.gradient_accumulation_fusion) is queued with the tensors
// it reads instead of run. The sink is told at once, so autograd's hooks and
// ZeRO's bookkeeping see a complete backward; run() later does the GEMMs, in
// order, into the same destinations. Weights without a sink keep autograd's
// path and get their gradient in B. The queued tensors (a layer's saved
// input, the output gradient) stay alive until W: ZB-H1's memory cost.
#include <cstddef>
#include <functional>
#include <vector>

namespace stratum::nn {

class DeferredWeightGrads {
 public:
  DeferredWeightGrads() = default;
  DeferredWeightGrads(const DeferredWeightGrads&) = delete;
  DeferredWeightGrads& operator=(const DeferredWeightGrads&) = delete;
  DeferredWeightGrads(DeferredWeightGrads&&) = default;
  DeferredWeightGrads& operator=(DeferredWeightGrads&&) = default;
  // Runs the queued GEMMs in the order queued and empties the queue.
  void run();
  size_t size() const { return gemms_.size(); }
  bool empty() const { return gemms_.empty(); }
  void add(std::function<void()> gemm) { gemms_.push_back(std::move(gemm)); }

 private:
  std::vector<std::function<void()>> gemms_;
};

// While alive, weight-gradient GEMMs into sinks go to `queue` (one scope at a
// time in a process; the backward may run on autograd's device thread).
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(DeferredWeightGrads& queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;
};

}  // namespace stratum::nn
