// ZeRO stage 1: optimizer states (fp32 master, Adam m and v) partitioned.
// Gradients stay whole (autograd accumulates into a flat buffer across
// micro-steps); at the boundary each bucket is reduce-scattered so a rank gets
// the averaged gradient of its slice; after the step each bucket's parameters
// are all-gathered from the ranks' updated slices.
#include <ATen/ATen.h>

#include "stratum/zero/flat_strategy.h"
#include "stratum/zero/zero_stages.h"

namespace stratum::zero {
namespace {

class Stage1 : public BoundaryReducedStrategy {
 public:
  using BoundaryReducedStrategy::BoundaryReducedStrategy;

  void init() {
    flat_grads_ = at::zeros_like(flat_params_);
    attach_grad_views(flat_grads_, layout_, params_);
    master_ = make_shard_master();
    params16_ = make_params16(master_.numel());
    for (size_t b = 0; b < layout_.buckets().size(); ++b) {
      const BucketSpan& s = layout_.buckets()[b];
      auto piece = [&](const at::Tensor& t) {
        return t.defined() ? t.narrow(0, s.shard_offset, s.slice_numel(dp_->size())) : t;
      };
      segments_.push_back(OptimizerSegment{piece(master_), slice_of(flat_grads_, static_cast<int>(b)), piece(params16_)});
    }
    install_hooks();
  }

  bool partitioned() const override { return true; }

  void publish_params() override { gather_params_from_shard(master_, params16_); }
  void zero_gradients() override { flat_grads_.zero_(); }

  std::vector<FlatPiece> owned_pieces() const override {
    return layout_.rank_pieces(dp_->rank(), /*segment_per_bucket=*/true);
  }

  ModelStateBytes bytes() const override {
    return {static_cast<int64_t>(flat_params_.nbytes()), static_cast<int64_t>(flat_grads_.nbytes()),
            static_cast<int64_t>(master_.nbytes())};
  }

 private:
  void launch(int b) override {
    launched_[b] = true;
    launch_reduction(bucket_of(flat_grads_, b), slice_of(flat_grads_, b), /*accumulate=*/false, /*scatter=*/true);
  }

  at::Tensor flat_grads_;
  at::Tensor master_;
  at::Tensor params16_;  // offload with 16-bit training: what the CPU Adam writes for the device
};

}  // namespace

std::unique_ptr<ZeroStrategy> make_stage1(const ZeroOptions& o, std::vector<at::Tensor> params,
                                          std::vector<std::string> names, at::ScalarType dtype,
                                          std::shared_ptr<dist::Communicator> dp) {
  auto s = std::make_unique<Stage1>(o, std::move(params), std::move(names), dtype, std::move(dp));
  s->init();
  return s;
}

}  // namespace stratum::zero
