#include "stratum/zero/reduced_grad_norm.h"

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "stratum/optim/grad_clip.h"

namespace stratum::zero {
namespace {

c10::Stream current_stream(c10::Device device) { return c10::impl::VirtualGuardImpl(device.type()).getStream(device); }

}  // namespace

ReducedGradNorm::ReducedGradNorm(c10::Device device, int64_t capacity)
    : device_(device), norms_(at::empty({capacity}, at::TensorOptions().dtype(at::kFloat).device(device))) {
  if (device.is_cuda()) side_ = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);
}

ReducedGradNorm::~ReducedGradNorm() {
  try {
    join();
  } catch (...) {  // a failed device: nothing left to order
  }
}

void ReducedGradNorm::add(const distributed::WorkPtr& work, const at::Tensor& reduced) {
  if (!valid_ || count_ == norms_.numel()) {
    valid_ = false;
    return;
  }
  if (!side_) {
    deferred_.push_back(reduced);  // a host wait here would hold backward up
  } else {
    c10::AutoGradMode no_grad(false);
    c10::Event landed(device_.type());
    if (!work) landed.record(current_stream(device_));
    c10::StreamGuard on_side(*side_);
    if (work) work->wait_in_background();
    else landed.block(*side_);
    at::Tensor slot = norms_.select(0, count_);
    optim::l2_norm_out(slot, reduced);
    done_.emplace(device_.type());
    done_->record(*side_);
    pieces_.push_back(reduced);
  }
  ++count_;
  numel_ += reduced.numel();
}

void ReducedGradNorm::renorm(const at::Tensor& piece) {
  if (!side_) return;  // CPU: pieces are normed in take(), after every change
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (pieces_[i].data_ptr() != piece.data_ptr() || pieces_[i].numel() != piece.numel()) continue;
    c10::AutoGradMode no_grad(false);
    c10::Event changed(device_.type());
    changed.record(current_stream(device_));
    c10::StreamGuard on_side(*side_);
    changed.block(*side_);
    at::Tensor slot = norms_.select(0, static_cast<int64_t>(i));
    optim::l2_norm_out(slot, piece);
    done_.emplace(device_.type());
    done_->record(*side_);
    return;
  }
  valid_ = false;  // not a piece of this window: the engine takes the norm itself
}

void ReducedGradNorm::join() {
  if (done_) done_->block(current_stream(device_));
  done_.reset();
}

at::Tensor ReducedGradNorm::take(int64_t expected_numel) {
  const bool usable = valid_ && count_ > 0 && numel_ == expected_numel;
  join();
  at::Tensor total;
  if (usable) {
    c10::AutoGradMode no_grad(false);
    for (size_t i = 0; i < deferred_.size(); ++i) {
      at::Tensor slot = norms_.select(0, static_cast<int64_t>(i));
      optim::l2_norm_out(slot, deferred_[i]);
    }
    total = norms_.narrow(0, 0, count_).square().sum();
  }
  reset();
  return total;
}

void ReducedGradNorm::reset() {
  join();
  deferred_.clear();
  pieces_.clear();
  count_ = numel_ = 0;
  valid_ = true;
}

}  // namespace stratum::zero
