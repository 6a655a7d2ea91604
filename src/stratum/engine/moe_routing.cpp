#include "stratum/engine/moe_routing.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "stratum/distributed/wait_context.h"

namespace stratum {

MoERouting::MoERouting(std::shared_ptr<nn::moe::RoutingRecord> record, std::vector<nn::moe::SparseMoEImpl*> layers,
                       std::shared_ptr<distributed::Communicator> dp, c10::Device device)
    : record_(std::move(record)),
      layers_(std::move(layers)),
      dp_(std::move(dp)),
      device_(device) {}

void MoERouting::before_backward(double loss_factor) { record_->set_backward_factor(loss_factor); }

namespace {
std::string bias_name(int64_t layer) { return "layers." + std::to_string(layer) + ".expert_bias"; }
}  // namespace

std::map<std::string, std::vector<double>> MoERouting::saved_state() const {
  std::map<std::string, std::vector<double>> out;
  for (const auto* layer : layers_) {
    if (!layer->expert_bias().defined()) continue;
    const at::Tensor b = layer->expert_bias().to(at::kCPU, at::kDouble).contiguous();
    out[bias_name(layer->layer())] = std::vector<double>(b.data_ptr<double>(), b.data_ptr<double>() + b.numel());
  }
  return out;
}

void MoERouting::load_state(const std::map<std::string, std::vector<double>>& state) {
  for (auto* layer : layers_) {
    if (!layer->expert_bias().defined()) continue;
    // A checkpoint saved without the bias (expert_bias_update_rate 0 then): it starts at zero.
    const auto it = state.find(bias_name(layer->layer()));
    if (it == state.end()) continue;
    layer->set_expert_bias(at::tensor(it->second, at::kDouble));
  }
}

void MoERouting::after_step(bool updated) {
  const auto loads = record_->take();
  last_ = RoutingStats{};
  if (layers_.empty()) return;
  // One collective a step: every layer's tokens per expert and the drop counts, summed over data parallelism.
  const int64_t experts = layers_.front()->options().router.num_experts;
  const int64_t n = static_cast<int64_t>(layers_.size());
  at::Tensor counts = at::zeros({n, experts + 2}, at::kDouble);
  at::Tensor terms = at::zeros({n, 3}, at::kDouble);  // aux sum, z sum, forwards
  for (int64_t i = 0; i < n; ++i) {
    const auto it = loads.find(layers_[static_cast<size_t>(i)]->layer());
    if (it == loads.end()) continue;
    const nn::moe::LayerLoad& l = it->second;
    counts[i].narrow(0, 0, experts).copy_(l.tokens.to(at::kCPU, at::kDouble));
    counts[i][experts] = static_cast<double>(l.dropped);
    counts[i][experts + 1] = static_cast<double>(l.assigned);
    if (l.aux_loss.defined()) terms[i][0] = l.aux_loss.item<double>();
    if (l.z_loss.defined()) terms[i][1] = l.z_loss.item<double>();
    terms[i][2] = static_cast<double>(l.forwards);
  }
  // fp32 on the wire (NCCL's), exact for counts below 2^24 a step and layer.
  at::Tensor both = at::cat({counts, terms}, 1).to(device_, at::kFloat);
  {
    distributed::WaitContext waiting("MoE routing: tokens per expert over the data-parallel ranks");
    dp_->all_reduce(both, distributed::ReduceOp::sum)->wait();
  }
  both = both.to(at::kCPU, at::kDouble);
  counts = both.narrow(1, 0, experts + 2);
  terms = both.narrow(1, experts + 2, 3);
  if (updated)
    for (int64_t i = 0; i < n; ++i) layers_[static_cast<size_t>(i)]->update_expert_bias(counts[i].narrow(0, 0, experts));
  double dropped = 0, assigned = 0, aux = 0, z = 0, forwards = 0;
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor t = counts[i].narrow(0, 0, experts);
    const double mean = t.mean().item<double>();
    if (mean > 0) {
      const double ratio = t.max().item<double>() / mean;
      if (ratio > last_.imbalance) {
        last_.imbalance = ratio;
        last_.worst_layer = layers_[static_cast<size_t>(i)]->layer();
      }
    }
    dropped += counts[i][experts].item<double>();
    assigned += counts[i][experts + 1].item<double>();
    aux += terms[i][0].item<double>();
    z += terms[i][1].item<double>();
    forwards += terms[i][2].item<double>();
  }
  last_.valid = assigned > 0;
  last_.dropped_fraction = assigned > 0 ? dropped / assigned : 0;
  last_.aux_loss = forwards > 0 ? aux / forwards : 0;
  last_.z_loss = forwards > 0 ? z / forwards : 0;
}

}  // namespace stratum
