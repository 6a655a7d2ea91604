// ZeRO stage 0: classic data parallelism. Full gradients in one flat buffer
// (BoundaryReducedStrategy: written by the first backward of a window), all-reduced
// bucket by bucket; every rank runs the optimizer on all fp32 master weights.
#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include "stratum/zero/flat_strategy.h"
#include "stratum/zero/zero_stages.h"

namespace stratum::zero {
namespace {

class Stage0 : public BoundaryReducedStrategy {
 public:
  using BoundaryReducedStrategy::BoundaryReducedStrategy;

  void init() {
    init_flat_grads();
    // fp32 training updates the parameters themselves; 16-bit keeps an fp32 master copy.
    master_ = model_dtype_ == at::kFloat ? flat_params_ : flat_params_.to(at::kFloat);
    const bool written = options_.device_params16 && !master_.is_same(flat_params_);
    segments_ = {OptimizerSegment{master_, flat_grads_, written ? flat_params_ : at::Tensor()}};
    install_hooks();
  }

  bool partitioned() const override { return false; }


  void publish_params() override {
    if (!master_.is_same(flat_params_) && !segments_[0].params16.is_same(flat_params_)) {
      c10::AutoGradMode no_grad(false);
      flat_params_.copy_(master_);
    }
  }

  std::vector<FlatPiece> owned_pieces() const override { return {FlatPiece{0, layout_.total_numel(), 0, 0}}; }

  ModelStateBytes bytes() const override {
    return {static_cast<int64_t>(flat_params_.nbytes()), static_cast<int64_t>(flat_grads_.nbytes()),
            master_.is_same(flat_params_) ? 0 : static_cast<int64_t>(master_.nbytes())};
  }

 private:
  void launch(int b) override {
    launched_[b] = true;
    at::Tensor bucket = bucket_of(flat_grads_, b);
    if (row_only_bucket(b)) return exchange_rows(b, bucket, 0);
    launch_reduction(bucket, bucket, /*accumulate=*/false, /*scatter=*/false);
  }

  std::pair<at::Tensor, int64_t> reduced_region(int b) const override { return {bucket_of(flat_grads_, b), 0}; }

  at::Tensor master_;
};

}  // namespace

std::unique_ptr<ZeroStrategy> make_stage0(const ZeroOptions& o, std::vector<at::Tensor> params,
                                          std::vector<std::string> names, at::ScalarType dtype,
                                          std::shared_ptr<distributed::Communicator> dp) {
  auto s = std::make_unique<Stage0>(o, std::move(params), std::move(names), dtype, std::move(dp));
  s->init();
  return s;
}

}  // namespace stratum::zero
