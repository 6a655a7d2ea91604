#pragma once
// What the three ZeRO stages share: the flat parameter buffer the module's
// parameters live in, gradient hooks that count a bucket's parameters as
// backward finishes them, and reductions in flight (with DeepSpeed's pre/post
// scaling and an optional wider dtype on the wire). Internal to zero/.
#include <memory>
#include <vector>

#include "stratum/zero/strategy.h"

namespace stratum::zero {

class FlatStrategy : public ZeroStrategy {
 public:
  FlatStrategy(const ZeroOptions& options, std::vector<at::Tensor> params, std::vector<std::string> names,
               at::ScalarType model_dtype, std::shared_ptr<dist::Communicator> dp);
  ~FlatStrategy() override;

  int stage() const override { return options_.stage; }
  const FlatLayout& layout() const override { return layout_; }
  std::vector<OptimizerSegment>& segments() override { return segments_; }

  // Called by the post-accumulate-grad hook of parameter `index` (autograd's thread).
  virtual void on_grad_ready(int index) = 0;

 protected:
  struct InFlight {
    dist::WorkPtr work;
    at::Tensor wire;     // what the collective reduced (the result, in comm dtype)
    at::Tensor dest;     // where the averaged gradient goes (model dtype)
    bool accumulate;     // dest += result (stage 2 across micro-steps), else dest = result
    at::Tensor keep;     // input kept alive until done
  };

  void install_hooks();
  void reset_pending();
  // Counts one finished parameter; true when its bucket has them all.
  bool count_ready(int index);
  // Reduces `grads` (a bucket, model dtype) over DP into `dest`: all-reduce when
  // dest is the whole bucket, reduce-scatter when dest is this rank's slice.
  void launch_reduction(const at::Tensor& grads, at::Tensor dest, bool accumulate, bool scatter);
  void wait_in_flight();
  // Rank r's slice of bucket b in a flat buffer.
  at::Tensor slice_of(const at::Tensor& flat, int b) const;
  at::Tensor bucket_of(const at::Tensor& flat, int b) const;
  // Stages 1/2: all-gather every bucket of the flat parameters from the masters.
  void gather_params_from_shard(const at::Tensor& master_shard);
  at::Tensor make_shard_master() const;

  ZeroOptions options_;
  FlatLayout layout_;
  std::vector<at::Tensor> params_;
  at::ScalarType model_dtype_;
  std::shared_ptr<dist::Communicator> dp_;
  at::Tensor flat_params_;
  std::vector<OptimizerSegment> segments_;
  std::vector<int> pending_;           // parameters still to finish, per bucket
  std::vector<bool> launched_;         // bucket reduction started this micro-step
  std::vector<InFlight> in_flight_;
  bool armed_ = false;                 // this micro-step's hooks launch reductions
  double pre_scale_ = 1.0, post_scale_ = 1.0;
};

// Stages 0 and 1: autograd accumulates whole gradients into the flat buffer
// across micro-steps; on the boundary micro-step each bucket is reduced as soon
// as its parameters are done (overlap_comm) or after backward.
class BoundaryReducedStrategy : public FlatStrategy {
 public:
  using FlatStrategy::FlatStrategy;

  void prepare_backward(bool boundary) override {
    armed_ = boundary;
    reset_pending();
  }
  void on_grad_ready(int index) override {
    if (!armed_ || !count_ready(index) || !options_.overlap_comm) return;
    launch(layout_.params()[index].bucket);
  }
  void finish_backward() override {
    if (!armed_) return;
    for (size_t b = 0; b < launched_.size(); ++b)
      if (!launched_[b]) launch(static_cast<int>(b));
  }
  void wait_gradients() override { wait_in_flight(); }

 protected:
  // Starts bucket b's reduction (and marks it launched).
  virtual void launch(int b) = 0;
};

}  // namespace stratum::zero
