#pragma once
// What a model's mixture-of-experts layers share with whoever trains it:
//   - the factor the trainer multiplies the loss by before backward (loss
//     scale over accumulation steps): the balancing terms' gradients are
//     injected at that scale (nn/moe/load_balancing.h); 1 until set;
//   - each layer's routing since it was last taken: tokens routed to each
//     expert (before any capacity drop), tokens dropped, the balancing terms'
//     values. Training forwards only (a checkpointed layer counts its
//     recomputation, not its gradient-free first run; evaluation counts nothing).
#include <cstdint>
#include <map>
#include <mutex>

#include <ATen/ATen.h>

namespace stratum::nn::moe {

struct LayerLoad {
  at::Tensor tokens;   // int64 [num_experts]: assignments routed to each expert
  int64_t dropped = 0;  // assignments over an expert's capacity
  int64_t assigned = 0;  // all assignments (tokens x top_k)
  at::Tensor aux_loss, z_loss;  // fp32 sums of the terms (without their coefficients); undefined: none
  int64_t forwards = 0;
};

class RoutingRecord {
 public:
  RoutingRecord() : factor_(at::ones({}, at::kDouble)) {}
  // The loss's backward factor: a 0-dim fp64 tensor on the CPU, read by the
  // balancing terms' backward when it runs.
  const at::Tensor& backward_factor() const { return factor_; }
  void set_backward_factor(double f) { factor_.fill_(f); }

  void add(int64_t layer, const at::Tensor& tokens, int64_t dropped, int64_t assigned, const at::Tensor& aux_loss,
           const at::Tensor& z_loss) {
    std::lock_guard<std::mutex> lock(mutex_);
    LayerLoad& l = layers_[layer];
    l.tokens = l.tokens.defined() ? l.tokens + tokens : tokens.clone();
    l.dropped += dropped;
    l.assigned += assigned;
    if (aux_loss.defined()) l.aux_loss = l.aux_loss.defined() ? l.aux_loss + aux_loss : aux_loss.clone();
    if (z_loss.defined()) l.z_loss = l.z_loss.defined() ? l.z_loss + z_loss : z_loss.clone();
    ++l.forwards;
  }
  // Every layer's load since the last take, by layer index; cleared.
  std::map<int64_t, LayerLoad> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<int64_t, LayerLoad> out;
    out.swap(layers_);
    return out;
  }

 private:
  at::Tensor factor_;
  std::mutex mutex_;
  std::map<int64_t, LayerLoad> layers_;
};

}  // namespace stratum::nn::moe
