#include "stratum/zero/bucket_param_gather.h"

#include <algorithm>

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>

#include "stratum/core/error.h"

namespace stratum::zero {

BucketParamGather::BucketParamGather(const FlatLayout& layout, at::Tensor flat_params,
                                     std::shared_ptr<distributed::Communicator> dp)
    : layout_(layout),
      flat_params_(std::move(flat_params)),
      dp_(std::move(dp)),
      in_flight_(layout.buckets().size()),
      inputs_(layout.buckets().size()),
      started_(layout.buckets().size(), false) {}

void BucketParamGather::wait_by_layer(const LayerParams& layers) {
  if (layers.own.empty()) return;
  layer_buckets_.assign(layers.own.size(), {});
  std::vector<bool> owned(layout_.buckets().size(), false);
  for (size_t l = 0; l < layers.own.size(); ++l) {
    std::vector<int>& mine = layer_buckets_[l];
    for (const auto* list : {&layers.own[l], &layers.borrowed[l]})
      for (int p : *list) {
        const int b = layout_.params().at(p).bucket;
        if (list == &layers.own[l]) owned[b] = true;
        if (std::find(mine.begin(), mine.end(), b) == mine.end()) mine.push_back(b);
      }
  }
  // A parameter outside every layer (none in Stratum's models) is read who knows where: first.
  for (size_t b = 0; b < owned.size(); ++b)
    if (!owned[b] && std::find(layer_buckets_[0].begin(), layer_buckets_[0].end(), static_cast<int>(b)) ==
                         layer_buckets_[0].end())
      layer_buckets_[0].push_back(static_cast<int>(b));
}

void BucketParamGather::start(int b, const at::Tensor& updated) {
  if (started_.at(b)) throw Error("ZeRO: bucket " + std::to_string(b) + "'s parameters were gathered twice in one step");
  c10::AutoGradMode no_grad(false);
  started_[b] = true;
  const BucketSpan& s = layout_.buckets()[b];
  at::Tensor out = flat_params_.narrow(0, s.offset, s.numel);
  const at::Tensor mine = flat_params_.narrow(0, layout_.slice_offset(b, dp_->rank()), s.slice_numel(dp_->size()));
  if (updated.is_alias_of(flat_params_) && updated.data_ptr() == mine.data_ptr() && updated.numel() == mine.numel()) {
    in_flight_[b] = dp_->all_gather(out, mine);  // in place: the slice is already in the buffer
    return;
  }
  // From pinned host memory the copy is asynchronous; the collective is ordered after it.
  inputs_[b] = updated.to(flat_params_.device(), flat_params_.scalar_type(), /*non_blocking=*/true);
  in_flight_[b] = dp_->all_gather(out, inputs_[b]);
}

void BucketParamGather::end_round() { std::fill(started_.begin(), started_.end(), false); }

void BucketParamGather::wait(int b) {
  if (!in_flight_[b]) return;
  in_flight_[b]->wait();
  in_flight_[b].reset();
  inputs_[b] = at::Tensor();
}

void BucketParamGather::wait_all() {
  for (size_t b = 0; b < in_flight_.size(); ++b) wait(static_cast<int>(b));
}

void BucketParamGather::before_forward(size_t layer) {
  if (layer < layer_buckets_.size())
    for (int b : layer_buckets_[layer]) wait(b);
  else
    wait_all();
}

}  // namespace stratum::zero
