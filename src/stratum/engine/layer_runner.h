#pragma once
// How the engine runs a LayerStack's layers: ZeRO-3 gathers each layer's
// parameters (and its frozen base, zero/frozen_units.h) around its forward
// and again before its backward, and
// activation checkpointing recomputes the chosen layers in backward (with
// ZeRO-3 the recompute finds the parameters gathered again).
#include <memory>
#include <vector>

#include "stratum/config/sections.h"
#include "stratum/nn/checkpoint.h"
#include "stratum/nn/layer_stack.h"
#include "stratum/zero/frozen_units.h"
#include "stratum/zero/strategy.h"

namespace stratum {

// contiguous_memory_optimization: the saved inputs of one forward's
// checkpointed layers, slot by slot in one buffer. A forward reuses the buffer
// when no graph of an earlier one still holds it (else it takes a new one), so
// the saved inputs never fragment the allocator.
class ContiguousCheckpointInputs {
 public:
  explicit ContiguousCheckpointInputs(size_t slots) : slots_(slots) {}
  // Before the forward's first checkpointed layer.
  void begin_forward() { next_ = 0; }
  // x copied into the next slot (x itself when x does not fit the buffer's slots).
  at::Tensor store(const at::Tensor& x);
  int64_t allocations() const { return allocations_; }

 private:
  size_t slots_, next_ = 0;
  at::Tensor buffer_;  // slots_ x slot numel, flat
  std::vector<int64_t> slot_sizes_;
  int64_t allocations_ = 0;
};

class EngineLayerRunner : public nn::LayerRunner {
 public:
  // `gatherer`: stage 3's (nullptr otherwise); `frozen`: stage 3's frozen
  // base (nullptr when not partitioned); `checkpointed[i]`: layer i is
  // recomputed; `lead` prints activation_checkpointing.profile's times every
  // `print_every` optimizer steps, read from `global_steps`.
  EngineLayerRunner(zero::LayerParamGatherer* gatherer, zero::FrozenUnits* frozen, std::vector<bool> checkpointed,
                    const config::ActivationCheckpointingConfig& ac, bool lead = false, int64_t print_every = 10,
                    const int64_t* global_steps = nullptr);
  at::Tensor run_layer(size_t index, nn::StackLayer& layer, const at::Tensor& x) override;
  // contiguous_memory_optimization's buffer of the inputs kept on the device
  // (null without it), and of those on the host (null without a split).
  const ContiguousCheckpointInputs* contiguous_inputs() const { return contiguous_.get(); }
  const ContiguousCheckpointInputs* contiguous_host_inputs() const { return contiguous_host_.get(); }
  // Layer i's checkpointed input is kept on the host (cpu_checkpointing).
  const std::vector<bool>& host_checkpointed() const { return host_checkpointed_; }

 private:
  // activation_checkpointing.profile: prints and resets the times at each print step.
  void report_profile();
  // cpu_checkpointing: throws Error naming the shortfall when the host
  // checkpoints of a forward whose block inputs look like x would not fit
  // the host's available memory (checked when the inputs first grow).
  void check_host_room(const at::Tensor& x);

  zero::LayerParamGatherer* gatherer_;
  zero::FrozenUnits* frozen_;
  std::vector<bool> checkpointed_, host_checkpointed_;
  size_t first_checkpointed_;
  int64_t host_blocks_ = 0;        // checkpointed blocks whose inputs go to the host
  int64_t host_block_bytes_ = 0;   // the pinned bytes of one such input, last checked
  int local_ranks_ = 1;            // ranks sharing this host
  nn::CheckpointOptions options_, host_options_;  // inputs kept on the device; on the host
  std::unique_ptr<ContiguousCheckpointInputs> contiguous_, contiguous_host_;
  bool lead_;
  int64_t print_every_;
  const int64_t* global_steps_;
  int64_t next_print_;
};

// The layers the activation_checkpointing section recomputes: the repeated
// layers (those of the most frequent kind: the transformer blocks), all of
// them, or the first `number_checkpoints`. None when the section is absent.
std::vector<bool> checkpointed_layers(const nn::LayerStackImpl& stack, const config::ActivationCheckpointingConfig& ac);

// Of the `checkpointed` layers, those whose inputs cpu_checkpointing keeps on
// the host: all of them, or the first cpu_checkpointing_layers (the inputs
// held longest, brought back last); none without cpu_checkpointing.
std::vector<bool> host_checkpointed_layers(const std::vector<bool>& checkpointed,
                                           const config::ActivationCheckpointingConfig& ac);

// Which trainable parameters (indices into `params`) each layer owns and borrows.
zero::LayerParams layer_params(const nn::LayerStackImpl& stack, const std::vector<at::Tensor>& params);

}  // namespace stratum
