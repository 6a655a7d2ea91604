#include "stratum/nn/tensor_parallel/random.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <vector>

#include "stratum/core/splitmix.h"

namespace stratum::nn::tp {

at::Tensor with_rank_stream(const TensorParallel& tp, c10::Device device, const std::function<at::Tensor()>& fn) {
  if (!tp.enabled()) return fn();
  std::vector<at::Generator> gens{at::globalContext().defaultGenerator(at::kCPU)};
  if (device.is_cuda()) gens.push_back(at::globalContext().defaultGenerator(device));
  uint64_t draw = 0;
  {
    std::lock_guard<std::mutex> lock(gens[0].mutex());
    draw = at::check_generator<at::CPUGeneratorImpl>(gens[0])->random64();
  }
  std::vector<at::Tensor> saved;
  for (size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    saved.push_back(gens[i].get_state());
    // One draw and ranks 0..t-1 (and each generator): unrelated seeds.
    gens[i].set_current_seed(splitmix64(draw ^ splitmix64(static_cast<uint64_t>(tp.rank()) * 2 + i)));
  }
  struct Restore {
    std::vector<at::Generator>& gens;
    std::vector<at::Tensor>& states;
    ~Restore() {
      for (size_t i = 0; i < gens.size(); ++i) {
        std::lock_guard<std::mutex> lock(gens[i].mutex());
        gens[i].set_state(states[i]);
      }
    }
  } restore{gens, saved};
  return fn();
}

at::Tensor dropout_outside_region(const at::Tensor& x, double p, const TensorParallel& tp) {
  if (p <= 0) return x;
  if (!tp.enabled() || !tp.sequence_parallel) return at::dropout(x, p, /*train=*/true);
  // The whole sequence's mask (what at::dropout draws for it), this rank's slice of it.
  std::vector<int64_t> whole = x.sizes().vec();
  whole[kSequenceDim] *= tp.size();
  const at::Tensor scale = at::dropout(at::ones(whole, x.options().requires_grad(false)), p, /*train=*/true);
  return x * scale.narrow(kSequenceDim, tp.rank() * x.size(kSequenceDim), x.size(kSequenceDim));
}

}  // namespace stratum::nn::tp
