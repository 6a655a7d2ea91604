#pragma once
// What the engine equivalence tests share: data-parallel groups of k ranks cut
// from the world (one job checks DP = 1, 2 and 4 side by side), a DistContext
// over such a group, the batches they train on and the relative difference
// they compare with.
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../distributed/distributed_test_context.h"

namespace stratum::test {

inline std::shared_ptr<distributed::Communicator> groups_of(int k, std::shared_ptr<distributed::Communicator> world = nullptr) {
  if (!world) world = context().cpu_world;
  std::vector<std::vector<int64_t>> groups(world->size() / k);
  for (int r = 0; r < world->size(); ++r) groups[r / k].push_back(r);
  return world->split(groups, "dp" + std::to_string(k));
}

// A DistContext over `world` (a group of the job's ranks), on the CPU.
inline distributed::DistContext sub_context(const std::shared_ptr<distributed::Communicator>& world) {
  distributed::DistContext ctx = context();
  ctx.cpu_world = world;
  ctx.gpu_world = nullptr;
  ctx.rank = world->rank();
  ctx.world_size = world->size();
  ctx.cuda_device = -1;
  return ctx;
}

// Step s's global batch: tokens [global_batch, seq + 1], each row counting up
// by a stride from a random start (seed 1000 + s), so there is something to learn.
inline at::Tensor counting_tokens(int step, int64_t global_batch, int64_t seq) {
  at::manual_seed(1000 + step);
  at::Tensor start = at::randint(0, 256, {global_batch, 1}, at::kLong);
  at::Tensor stride = at::randint(1, 4, {global_batch, 1}, at::kLong);
  return (start + stride * at::arange(seq + 1, at::kLong).unsqueeze(0)).remainder(256);
}

// Steps [first, first + steps) of an Engine (engine/engine.h) on
// counting_tokens: data-parallel rank r of n takes rows [(k·n + r)·m, ...) of
// micro-step k, m = global_batch / (gas·n), and the ranks of a tensor-parallel
// group the same rows. Appends each step's loss (the mean over its micro-steps
// and the data-parallel ranks) and gradient norm.
template <class Engine>
void train_steps(Engine& engine, int first, int steps, int64_t global_batch, int64_t gas, int64_t seq,
                 std::vector<double>& losses, std::vector<double>& grad_norms) {
  // Every rank reading data of its own (expert parallelism's ranks too).
  const auto& dp = engine.core().data_parallel();
  const int64_t n = dp->size(), r = dp->rank(), m = global_batch / (gas * n);
  for (int s = first; s < first + steps; ++s) {
    const at::Tensor t = counting_tokens(s, global_batch, seq);
    at::Tensor loss = at::zeros({1}, at::kDouble);
    for (int64_t k = 0; k < gas; ++k) {
      const at::Tensor b = t.narrow(0, (k * n + r) * m, m);
      const at::Tensor out = engine.forward(b.narrow(1, 0, seq), b.narrow(1, 1, seq));
      engine.backward(out);
      engine.step();
      loss += out.detach().to(at::kDouble) / static_cast<double>(gas * n);
    }
    dp->all_reduce(loss, distributed::ReduceOp::sum)->wait();
    losses.push_back(loss.item<double>());
    grad_norms.push_back(engine.core().last_grad_norm());
  }
}

// GPT-2's attention key bias gets a gradient of rounding noise only (softmax
// ignores a constant added to every score of a row), which Adam turns into
// steps of a full learning rate either way: it is compared by the losses alone.
inline at::Tensor without_key_bias(const std::string& name, const at::Tensor& w) {
  if (name.size() < 16 || name.compare(name.size() - 16, 16, "attn.c_attn.bias") != 0) return w;
  const int64_t h = w.numel() / 3;
  return at::cat({w.narrow(0, 0, h), w.narrow(0, 2 * h, h)});
}

// max |a - b| / max |b|
inline double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

}  // namespace stratum::test
