// The offload optimizer step (HostAdam) against the device path (adam_step,
// torch's fused kernel): gradients on the host, and on a GPU where they come
// down in chunks through the pinned ring (chunks smaller than the segment, an
// odd remainder), with the bf16 copy for the device written in the same pass.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "stratum/core/error.h"
#include "stratum/optim/adam.h"
#include "stratum/optim/host_adam.h"

using namespace stratum;
using namespace stratum::optim;

namespace {

config::OptimizerConfig adamw() {
  config::OptimizerConfig o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  return o;
}

// Three steps on both paths from the same start; returns the max relative difference of the params.
double compare(c10::Device grad_device, int64_t n, int64_t chunk, at::Tensor* params16_out = nullptr) {
  torch::manual_seed(0);
  at::Tensor start = torch::randn({n});
  at::Tensor ref = start.clone(), host = start.clone();
  AdamState ref_state = make_adam_state(ref), host_state = make_adam_state(host);
  at::Tensor params16 = at::empty({n}, at::kBFloat16);
  HostAdam opt(adamw(), 0.5, /*ranks_per_node=*/1, chunk);
  for (int step = 0; step < 3; ++step) {
    at::Tensor grad = torch::randn({n}).mul(0.1).to(at::kBFloat16);
    at::Tensor g32 = grad.to(at::kFloat);
    adam_step(ref, g32, ref_state, adamw(), 1e-2, std::nullopt, /*grad_scale=*/2.0);
    opt.step(host, grad.to(grad_device), params16, host_state, 1e-2, std::nullopt, /*grad_scale=*/2.0);
  }
  EXPECT_EQ(host_state.step.item<float>(), 3.0f);
  EXPECT_TRUE(at::equal(params16, host.to(at::kBFloat16))) << "the bf16 copy is the rounded update";
  if (params16_out) *params16_out = params16;
  return ((host - ref).abs().max() / ref.abs().max()).item<double>();
}

}  // namespace

TEST(HostAdam, MatchesTheDeviceAdamOnHostGradients) {
  EXPECT_LE(compare(c10::kCPU, 10007, 1 << 24), 2e-6);
  // 16-bit host gradients widened a chunk at a time (an odd remainder last).
  EXPECT_LE(compare(c10::kCPU, 10007, 1000), 2e-6);
}

// bias_correction false reaches the CPU Adam: the same as the device path's.
TEST(HostAdam, WithoutBiasCorrectionMatchesTheDeviceAdam) {
  config::OptimizerConfig o = adamw();
  o.bias_correction = false;
  torch::manual_seed(1);
  const int64_t n = 1001;
  at::Tensor ref = torch::randn({n}), host = ref.clone();
  AdamState ref_state = make_adam_state(ref), host_state = make_adam_state(host);
  HostAdam opt(o, 0.5);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor grad = torch::randn({n});
    adam_step(ref, grad.clone(), ref_state, o, 1e-2, std::nullopt, 2.0);
    opt.step(host, grad, at::Tensor(), host_state, 1e-2, std::nullopt, 2.0);
  }
  EXPECT_LE(((host - ref).abs().max() / ref.abs().max()).item<double>(), 2e-6);
  // And not the corrected step.
  torch::manual_seed(1);  // the same start and gradients
  at::Tensor corrected = torch::randn({n});
  AdamState corrected_state = make_adam_state(corrected);
  HostAdam opt_corrected(adamw(), 0.5);
  for (int step = 0; step < 3; ++step)
    opt_corrected.step(corrected, torch::randn({n}), at::Tensor(), corrected_state, 1e-2, std::nullopt, 2.0);
  EXPECT_GT((corrected - host).abs().max().item<double>(), 1e-4);
}

TEST(HostAdam, ChunkedCopiesFromAGpuMatch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  for (int64_t chunk : {int64_t{1000}, int64_t{4096}, int64_t{1} << 24})
    EXPECT_LE(compare(c10::Device(c10::kCUDA, 0), 10007, chunk), 2e-6) << "chunk " << chunk;
}

TEST(HostAdam, BadInputIsNamed) {
  HostAdam opt(adamw(), 0.5);
  at::Tensor p = torch::zeros({4}), g = torch::zeros({5});
  AdamState s = make_adam_state(p);
  EXPECT_THROW(opt.step(p, g, at::Tensor(), s, 1e-3, std::nullopt, 1.0), Error);
  at::Tensor half = torch::zeros({4}, at::kHalf);
  EXPECT_THROW(opt.step(half, g, at::Tensor(), s, 1e-3, std::nullopt, 1.0), Error);
}
