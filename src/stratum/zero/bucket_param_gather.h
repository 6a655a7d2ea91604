#pragma once
// Stages 1/2 after the optimizer: each bucket of the flat parameter buffer is
// all-gathered from the ranks' updated slices. A bucket's gather starts as
// soon as its slice is updated, so the rest of the optimizer overlaps it. The
// waits are stream-ordered: either all at the end of publishing, or (lazy, a
// LayerStack model) each before the first layer that reads the bucket, so the
// next forward overlaps the gathers too. Internal to zero/.
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"
#include "stratum/zero/flat_layout.h"
#include "stratum/zero/strategy.h"

namespace stratum::zero {

class BucketParamGather : public LayerParamGatherer {
 public:
  BucketParamGather(const FlatLayout& layout, at::Tensor flat_params, std::shared_ptr<distributed::Communicator> dp);

  // Leaves the waits to before_forward: `layers` tells which buckets each
  // layer reads (its own and borrowed parameters; buckets no layer owns are
  // waited for before layer 0).
  void wait_by_layer(const LayerParams& layers);
  bool lazy() const { return !layer_buckets_.empty(); }

  // Starts bucket b's all-gather from `updated`, this rank's slice of it: in
  // place when `updated` is that slice of the flat buffer, else from a copy
  // in the model's dtype on its device (a host or fp32 master). Once per round.
  void start(int b, const at::Tensor& updated);
  bool started(int b) const { return started_[b]; }
  // Ends a round: the next start() of every bucket is allowed again.
  void end_round();
  void wait_all();

  // LayerParamGatherer: only before_forward has work.
  void before_forward(size_t layer) override;
  void after_forward(size_t, bool) override {}
  void before_backward(size_t) override {}
  int64_t live_elems() const override { return 0; }
  int64_t peak_live_elems() const override { return 0; }

 private:
  void wait(int b);

  const FlatLayout& layout_;
  at::Tensor flat_params_;
  std::shared_ptr<distributed::Communicator> dp_;
  std::vector<distributed::WorkPtr> in_flight_;  // per bucket, until waited
  std::vector<at::Tensor> inputs_;        // a copied input, alive until its gather is waited for
  std::vector<bool> started_;
  std::vector<std::vector<int>> layer_buckets_;
};

}  // namespace stratum::zero
