#include "stratum/optim/host_adam.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>

#include "stratum/core/error.h"
#include "stratum/optim/cpu_adam.h"

namespace stratum::optim {

HostAdam::HostAdam(config::OptimizerConfig optimizer, double cores_perc, int ranks_per_node, int64_t chunk_elems)
    : optimizer_(optimizer), threads_(cpu_adam_threads(cores_perc, ranks_per_node)), chunk_elems_(chunk_elems) {}

void HostAdam::step(at::Tensor& master, const at::Tensor& grad, const at::Tensor& params16, AdamState& state,
                    double lr, std::optional<double> beta1_override, double grad_scale) {
  if (master.is_cuda() || master.scalar_type() != at::kFloat || !master.is_contiguous())
    throw Error("offload optimizer: the masters must be contiguous fp32 host tensors");
  if (grad.numel() != master.numel())
    throw Error("offload optimizer: " + std::to_string(grad.numel()) + " gradients for " +
                std::to_string(master.numel()) + " parameters");
  CpuAdamStep s;
  s.lr = lr;
  s.beta1 = beta1_override.value_or(optimizer_.beta1);
  s.beta2 = optimizer_.beta2;
  s.eps = optimizer_.eps;
  s.weight_decay = optimizer_.weight_decay;
  s.decoupled = decoupled_weight_decay(optimizer_);
  s.step = static_cast<int64_t>(state.step.item<float>()) + 1;
  s.grad_scale = grad_scale;
  s.num_threads = threads_;
  const Copy16 format = params16.defined() && params16.scalar_type() == at::kHalf ? Copy16::fp16 : Copy16::bf16;
  auto* p16 = params16.defined() ? reinterpret_cast<uint16_t*>(params16.data_ptr()) : nullptr;
  const int64_t n = master.numel();
  float* p = master.data_ptr<float>();
  float* m = state.exp_avg.data_ptr<float>();
  float* v = state.exp_avg_sq.data_ptr<float>();

  if (!grad.is_cuda()) {  // CPU training: the gradients are here already
    const at::Tensor g = grad.scalar_type() == at::kFloat ? grad.contiguous() : grad.to(at::kFloat).contiguous();
    cpu_adam_step(p, g.data_ptr<float>(), m, v, n, s, p16, format);
  } else {
    // Two chunks in flight: chunk k + 2 is copied into k's buffer once k is updated.
    const int64_t chunk = std::min(chunk_elems_, n);
    for (auto& buf : ring_)
      if (!buf.defined() || buf.numel() < chunk)
        buf = at::empty({chunk}, at::TensorOptions().dtype(at::kFloat).device(at::kCPU).pinned_memory(true));
    const c10::impl::VirtualGuardImpl impl(grad.device().type());
    const c10::Stream stream = impl.getStream(grad.device());
    c10::Event events[2] = {c10::Event(grad.device().type()), c10::Event(grad.device().type())};
    const int64_t chunks = (n + chunk - 1) / chunk;
    auto enqueue = [&](int64_t k) {
      const int64_t off = k * chunk, len = std::min(chunk, n - off);
      ring_[k % 2].narrow(0, 0, len).copy_(grad.narrow(0, off, len).to(at::kFloat), /*non_blocking=*/true);
      events[k % 2].record(stream);
    };
    for (int64_t k = 0; k < std::min<int64_t>(2, chunks); ++k) enqueue(k);
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t off = k * chunk, len = std::min(chunk, n - off);
      events[k % 2].synchronize();
      cpu_adam_step(p + off, ring_[k % 2].data_ptr<float>(), m + off, v + off, len, s, p16 ? p16 + off : nullptr,
                    format);
      if (k + 2 < chunks) enqueue(k + 2);
    }
  }
  state.step.add_(1);
}

}  // namespace stratum::optim
