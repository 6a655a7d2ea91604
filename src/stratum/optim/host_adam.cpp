#include "stratum/optim/host_adam.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>

#include "stratum/core/error.h"
#include "stratum/optim/cpu_adam.h"
#include "stratum/optim/cpu_lamb.h"

namespace stratum::optim {
namespace {

// Runs of [0, n) clipped to [off, off + len), offsets made relative to off.
std::vector<ParamRun> clip_runs(const std::vector<ParamRun>& runs, int64_t off, int64_t len) {
  std::vector<ParamRun> out;
  for (const ParamRun& r : runs) {
    const int64_t from = std::max(r.offset, off), to = std::min(r.offset + r.numel, off + len);
    if (from < to) out.push_back(ParamRun{r.param, from - off, to - from});
  }
  return out;
}

void check_runs(const std::vector<ParamRun>& runs, int64_t n) {
  for (const ParamRun& r : runs)
    if (r.offset < 0 || r.numel < 1 || r.offset > n - r.numel)
      throw Error("offload optimizer: a Lamb run (parameter " + std::to_string(r.param) + ", elements " +
                  std::to_string(r.offset) + " + " + std::to_string(r.numel) + ") leaves the segment of " +
                  std::to_string(n) + " elements");
}

}  // namespace

HostAdam::HostAdam(config::OptimizerConfig optimizer, double cores_perc, int ranks_per_node, int64_t chunk_elems)
    : optimizer_(optimizer), threads_(cpu_adam_threads(cores_perc, ranks_per_node)), chunk_elems_(chunk_elems) {}

void HostAdam::check(const at::Tensor& master, const at::Tensor* grad) const {
  if (master.is_cuda() || master.scalar_type() != at::kFloat || !master.is_contiguous())
    throw Error("offload optimizer: the masters must be contiguous fp32 host tensors");
  if (grad && grad->numel() != master.numel())
    throw Error("offload optimizer: " + std::to_string(grad->numel()) + " gradients for " +
                std::to_string(master.numel()) + " parameters");
}

void HostAdam::for_each_grad_chunk(const at::Tensor& grad,
                                   const std::function<void(int64_t, int64_t, const float*)>& fn) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  if (!grad.is_cuda()) {  // CPU training: the gradients are here already
    if (grad.scalar_type() == at::kFloat) {
      const at::Tensor g = grad.contiguous();
      fn(0, n, g.const_data_ptr<float>());
      return;
    }
    // 16-bit gradients widen a chunk at a time: never an fp32 copy of the whole shard.
    const int64_t chunk = std::min(chunk_elems_, n);
    const at::Tensor buf = at::empty({chunk}, at::TensorOptions().dtype(at::kFloat));
    for (int64_t off = 0; off < n; off += chunk) {
      const int64_t len = std::min(chunk, n - off);
      buf.narrow(0, 0, len).copy_(grad.narrow(0, off, len));
      fn(off, len, buf.const_data_ptr<float>());
    }
    return;
  }
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
    fn(off, len, ring_[k % 2].const_data_ptr<float>());
    if (k + 2 < chunks) enqueue(k + 2);
  }
}

void HostAdam::step(at::Tensor& master, const at::Tensor& grad, const at::Tensor& params16, AdamState& state,
                    double lr, std::optional<double> beta1_override, double grad_scale) {
  check(master, &grad);
  CpuAdamStep s;
  s.lr = lr;
  s.beta1 = beta1_override.value_or(optimizer_.beta1);
  s.beta2 = optimizer_.beta2;
  s.eps = optimizer_.eps;
  s.weight_decay = optimizer_.weight_decay;
  s.decoupled = decoupled_weight_decay(optimizer_);
  s.bias_correction = optimizer_.bias_correction;
  s.step = static_cast<int64_t>(state.step.item<float>()) + 1;
  s.grad_scale = grad_scale;
  s.num_threads = threads_;
  const Copy16 format = params16.defined() && params16.scalar_type() == at::kHalf ? Copy16::fp16 : Copy16::bf16;
  auto* p16 = params16.defined() ? reinterpret_cast<uint16_t*>(params16.data_ptr()) : nullptr;
  float* p = master.data_ptr<float>();
  float* m = state.exp_avg.data_ptr<float>();
  float* v = state.exp_avg_sq.data_ptr<float>();
  for_each_grad_chunk(grad, [&](int64_t off, int64_t len, const float* g) {
    cpu_adam_step(p + off, g, m + off, v + off, len, s, p16 ? p16 + off : nullptr, format);
  });
  state.step.add_(1);
}

namespace {
CpuLambStep lamb_step_of(const config::OptimizerConfig& o, std::optional<double> beta1_override, int64_t step,
                         int threads) {
  CpuLambStep s;
  s.beta1 = beta1_override.value_or(o.beta1);
  s.beta2 = o.beta2;
  s.eps = o.eps;
  s.weight_decay = o.weight_decay;
  s.bias_correction = o.bias_correction;
  s.step = step;
  s.num_threads = threads;
  return s;
}
}  // namespace

void HostAdam::lamb_moments(at::Tensor& master, const at::Tensor& grad, AdamState& state,
                            const std::vector<ParamRun>& runs, std::optional<double> beta1_override, double grad_scale,
                            double* sq_params, double* sq_updates) {
  check(master, &grad);
  check_runs(runs, master.numel());
  CpuLambStep s = lamb_step_of(optimizer_, beta1_override, static_cast<int64_t>(state.step.item<float>()) + 1, threads_);
  s.grad_scale = grad_scale;
  const float* p = master.const_data_ptr<float>();
  float* m = state.exp_avg.data_ptr<float>();
  float* v = state.exp_avg_sq.data_ptr<float>();
  for_each_grad_chunk(grad, [&](int64_t off, int64_t len, const float* g) {
    const std::vector<ParamRun> chunk_runs = clip_runs(runs, off, len);
    if (!chunk_runs.empty()) cpu_lamb_moments(p + off, g, m + off, v + off, chunk_runs, s, sq_params, sq_updates);
  });
  state.step.add_(1);
}

void HostAdam::lamb_update(at::Tensor& master, const at::Tensor& params16, const AdamState& state,
                           const std::vector<ParamRun>& runs, double lr, std::optional<double> beta1_override,
                           const double* trust_ratios) {
  check(master, nullptr);
  check_runs(runs, master.numel());
  if (params16.defined() && (params16.is_cuda() || params16.numel() != master.numel() ||
                             (params16.scalar_type() != at::kBFloat16 && params16.scalar_type() != at::kHalf)))
    throw Error("offload optimizer: params16 must be a bf16 or fp16 host tensor of the masters' size");
  // The step pass 1 counted.
  CpuLambStep s = lamb_step_of(optimizer_, beta1_override, static_cast<int64_t>(state.step.item<float>()), threads_);
  s.lr = lr;
  const Copy16 format = params16.defined() && params16.scalar_type() == at::kHalf ? Copy16::fp16 : Copy16::bf16;
  cpu_lamb_update(master.data_ptr<float>(), state.exp_avg.const_data_ptr<float>(),
                  state.exp_avg_sq.const_data_ptr<float>(), runs, s, trust_ratios,
                  params16.defined() ? reinterpret_cast<uint16_t*>(params16.data_ptr()) : nullptr, format);
}

}  // namespace stratum::optim
