// ZeRO stage 2: gradients partitioned too. A hook copies each finished
// gradient into its bucket's staging buffer and frees it; a full bucket is
// reduce-scattered (during backward with overlap_comm) and the rank's slice is
// accumulated into its gradient shard. No rank holds the whole gradient beyond
// the buckets in flight (at most kMaxInFlight). Reductions happen every
// micro-step, or once a window under ZB-H1 (ZeroOptions::reduce_at_window_end).
#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include "stratum/zero/flat_strategy.h"
#include "stratum/zero/zero_stages.h"

namespace stratum::zero {
namespace {

class Stage2 : public FlatStrategy {
 public:
  static constexpr size_t kMaxInFlight = 2;

  using FlatStrategy::FlatStrategy;

  void init(const LayerParams* layers) {
    grad_shard_ = at::zeros({layout_.shard_numel()}, flat_params_.options().dtype(grad_dtype_));
    master_ = make_shard_master();
    params16_ = make_params16(master_.numel());
    make_bucket_segments(master_, grad_shard_, params16_, layers);
    staging_.resize(layout_.buckets().size());
    install_hooks();
    register_weight_grad_sinks();
  }

  bool partitioned() const override { return true; }

  void prepare_backward(bool boundary) override {
    armed_ = true;
    final_reductions_ = boundary;
    reset_pending();
  }

  void on_grad_ready(int index) override {
    if (row_only(index)) return;  // its gradient comes as rows (take_rows)
    c10::AutoGradMode no_grad(false);
    const ParamSlot& slot = layout_.params()[index];
    at::Tensor& p = params_[index];
    stage_gradient(staging_for(slot.bucket), index, p.grad());
    p.mutable_grad().reset();  // the full gradient is not kept
    if (count_ready(index) && options_.overlap_comm && !options_.reduce_at_window_end) {
      launch(slot.bucket);
      wait_in_flight(kMaxInFlight);  // caps the staging buffers alive at once
    }
  }

  void finish_backward() override {
    if (options_.reduce_at_window_end && !final_reductions_) return;  // W has yet to write this window's
    for (size_t b = 0; b < launched_.size(); ++b)
      if (!launched_[b]) launch(static_cast<int>(b));
    wait_in_flight();  // staging buffers are freed every micro-step
    if (final_reductions_) add_tied_rows();
    first_micro_step_ = false;
  }

  void wait_gradients() override {}
  void publish_params() override { publish_bucket_params(); }

  void zero_gradients() override {
    forget_grad_norm();
    grad_shard_.zero_();
    first_micro_step_ = true;
  }

  std::vector<FlatPiece> owned_pieces() const override {
    return layout_.rank_pieces(dp_->rank(), /*segment_per_bucket=*/true);
  }

  ModelStateBytes bytes() const override {
    return {static_cast<int64_t>(flat_params_.nbytes()), static_cast<int64_t>(grad_shard_.nbytes()),
            static_cast<int64_t>(master_.nbytes())};
  }

 private:
  // The parameter's range of its bucket's staging buffer (reduced each micro-step).
  at::Tensor fused_destination(int index, bool* accumulate) override {
    const at::Tensor& staging = staging_for(layout_.params()[index].bucket);  // first: a new buffer resets staged_
    *accumulate = staged_[index] || fused_[index];
    return staging_slot(staging, index).view(params_[index].sizes());
  }

  at::Tensor& staging_for(int b) {
    if (!staging_[b].defined()) staging_[b] = new_staging(b);
    return staging_[b];
  }

  void launch(int b) {
    launched_[b] = true;
    if (row_only_bucket(b)) {
      // The window's rows are exchanged once, at its last micro-step.
      if (final_reductions_) {
        auto [dest, offset] = reduced_region(b);
        exchange_rows(b, dest, offset);
      }
      return;
    }
    at::Tensor staging = staging_for(b);
    zero_unstaged(staging, b);
    staging_[b] = at::Tensor();  // owned by the reduction until it completes
    const BucketSpan& s = layout_.buckets()[b];
    at::Tensor dest = grad_shard_.narrow(0, s.shard_offset, s.slice_numel(dp_->size()));
    launch_reduction(staging, dest, /*accumulate=*/!first_micro_step_, /*scatter=*/true);
  }

  std::pair<at::Tensor, int64_t> reduced_region(int b) const override {
    const BucketSpan& s = layout_.buckets()[b];
    return {grad_shard_.narrow(0, s.shard_offset, s.slice_numel(dp_->size())),
            layout_.slice_offset(b, dp_->rank()) - s.offset};
  }

  at::Tensor grad_shard_;
  at::Tensor master_;
  at::Tensor params16_;  // offload with 16-bit training: what the CPU Adam writes for the device
  std::vector<at::Tensor> staging_;
  bool first_micro_step_ = true;
};

}  // namespace

std::unique_ptr<ZeroStrategy> make_stage2(const ZeroOptions& o, std::vector<at::Tensor> params,
                                          std::vector<std::string> names, at::ScalarType dtype,
                                          std::shared_ptr<distributed::Communicator> dp, const LayerParams* layers) {
  auto s = std::make_unique<Stage2>(o, std::move(params), std::move(names), dtype, std::move(dp));
  s->init(layers);
  return s;
}

}  // namespace stratum::zero
