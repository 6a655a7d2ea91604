#pragma once
// How the engine runs a LayerStack's layers: ZeRO-3 gathers each layer's
// parameters around its forward and again before its backward, and
// activation checkpointing recomputes the chosen layers in backward (with
// ZeRO-3 the recompute finds the parameters gathered again).
#include <memory>
#include <vector>

#include "stratum/config/sections.h"
#include "stratum/nn/layer_stack.h"
#include "stratum/zero/strategy.h"

namespace stratum {

class EngineLayerRunner : public nn::LayerRunner {
 public:
  // `gatherer`: stage 3's (nullptr otherwise); `checkpointed[i]`: layer i is recomputed.
  EngineLayerRunner(zero::LayerParamGatherer* gatherer, std::vector<bool> checkpointed, bool cpu_checkpointing);
  at::Tensor run_layer(size_t index, nn::StackLayer& layer, const at::Tensor& x) override;

 private:
  zero::LayerParamGatherer* gatherer_;
  std::vector<bool> checkpointed_;
  bool cpu_checkpointing_;
};

// The layers the activation_checkpointing section recomputes: the repeated
// layers (those of the most frequent kind: the transformer blocks), all of
// them, or the first `number_checkpoints`. None when the section is absent.
std::vector<bool> checkpointed_layers(const nn::LayerStackImpl& stack, const config::ActivationCheckpointingConfig& ac);

// Which trainable parameters (indices into `params`) each layer owns and borrows.
zero::LayerParams layer_params(const nn::LayerStackImpl& stack, const std::vector<at::Tensor>& params);

}  // namespace stratum
