#pragma once
// The training step's side of a mixture of experts (nn/moe/): before each
// backward it gives the layers the loss's factor (their balancing terms'
// gradients are injected at that scale), and after each optimizer step it
// takes the step's routing: the tokens each expert received summed over the
// data-parallel ranks, which move the experts' biases (aux-loss-free
// balancing) and make the step's load figures.
#include <cstdint>
#include <memory>
#include <vector>

#include "stratum/distributed/communicator.h"
#include "stratum/engine/engine_core.h"
#include "stratum/nn/moe/routing_record.h"
#include "stratum/nn/moe/sparse_moe.h"

namespace stratum {

// One optimizer step's routing, over this rank's layers and every data-parallel rank.
struct RoutingStats {
  bool valid = false;
  // The largest over this rank's layers of (most tokens an expert received
  // / mean over the experts): 1 is an even load.
  double imbalance = 0;
  int64_t worst_layer = -1;
  double aux_loss = 0;      // the balancing term's mean over layers and micro-batches (0: none)
  double z_loss = 0;
  double dropped_fraction = 0;  // assignments over capacity / all assignments
};

class MoERouting : public StepObserver {
 public:
  // `layers`: this rank's mixture-of-experts blocks (the model owns them),
  // sharing `record`. `device`: dp's tensors'.
  MoERouting(std::shared_ptr<nn::moe::RoutingRecord> record, std::vector<nn::moe::SparseMoEImpl*> layers,
             std::shared_ptr<distributed::Communicator> dp, c10::Device device);
  void before_backward(double loss_factor) override;
  void after_step(bool updated) override;
  // The expert biases (aux-loss-free balancing), "layers.<i>.expert_bias".
  std::map<std::string, std::vector<double>> saved_state() const override;
  void load_state(const std::map<std::string, std::vector<double>>& state) override;
  const RoutingStats& last() const { return last_; }

 private:
  std::shared_ptr<nn::moe::RoutingRecord> record_;
  std::vector<nn::moe::SparseMoEImpl*> layers_;
  std::shared_ptr<distributed::Communicator> dp_;
  c10::Device device_;
  RoutingStats last_;
};

}  // namespace stratum

namespace stratum {
// The last step's routing of the core's mixture of experts; null when it has none.
inline const RoutingStats* routing_stats(const EngineCore& core) {
  const auto* routing = dynamic_cast<const MoERouting*>(core.step_observer().get());
  return routing && routing->last().valid ? &routing->last() : nullptr;
}
}  // namespace stratum
