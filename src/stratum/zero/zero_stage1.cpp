// ZeRO stage 1: optimizer states (fp32 master, Adam m and v) partitioned.
// Gradients stay whole (in a flat buffer, accumulated across micro-steps: see
// BoundaryReducedStrategy); at the boundary each bucket is reduce-scattered so a rank gets
// the averaged gradient of its slice; after the step each bucket's parameters
// are all-gathered from the ranks' updated slices (bucket_param_gather.h).
#include <ATen/ATen.h>

#include "stratum/zero/flat_strategy.h"
#include "stratum/zero/zero_stages.h"

namespace stratum::zero {
namespace {

class Stage1 : public BoundaryReducedStrategy {
 public:
  using BoundaryReducedStrategy::BoundaryReducedStrategy;

  void init(const LayerParams* layers) {
    init_flat_grads();
    master_ = make_shard_master();
    params16_ = make_params16(master_.numel());
    make_bucket_segments(master_, at::Tensor(), params16_, layers);
    // The reduced gradient of a slice lands in the whole-gradient buffer, in place.
    for (size_t b = 0; b < segments_.size(); ++b) segments_[b].grad = slice_of(flat_grads_, static_cast<int>(b));
    install_hooks();
  }

  bool partitioned() const override { return true; }

  void publish_params() override { publish_bucket_params(); }

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
    if (row_only_bucket(b)) {
      auto [dest, offset] = reduced_region(b);
      return exchange_rows(b, dest, offset);
    }
    launch_reduction(bucket_of(flat_grads_, b), slice_of(flat_grads_, b), /*accumulate=*/false, /*scatter=*/true);
  }

  std::pair<at::Tensor, int64_t> reduced_region(int b) const override {
    return {slice_of(flat_grads_, b), layout_.slice_offset(b, dp_->rank()) - layout_.buckets()[b].offset};
  }

  at::Tensor master_;
  at::Tensor params16_;  // offload with 16-bit training: what the CPU Adam writes for the device
};

}  // namespace

std::unique_ptr<ZeroStrategy> make_stage1(const ZeroOptions& o, std::vector<at::Tensor> params,
                                          std::vector<std::string> names, at::ScalarType dtype,
                                          std::shared_ptr<distributed::Communicator> dp, const LayerParams* layers) {
  auto s = std::make_unique<Stage1>(o, std::move(params), std::move(names), dtype, std::move(dp));
  s->init(layers);
  return s;
}

}  // namespace stratum::zero
