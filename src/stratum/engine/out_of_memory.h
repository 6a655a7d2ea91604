// A GPU running out of memory in training, explained: torch's account of the
// memory, then the settings that lower a rank's peak that this run does not
// use yet, each named as the config or a flag sets it, and the
// stratum-estimate command that weighs them for this run.
#pragma once

#include <cstdint>
#include <string>

namespace stratum {

// What the run used when the allocation failed.
struct MemorySettings {
  std::string model;  // the preset's name (for the stratum-estimate command)
  int64_t seq = 0;
  int64_t micro_batch = 1;
  int zero_stage = 0;
  bool offload_optimizer = false;
  bool offload_param = false;
  bool checkpointing = false;      // an "activation_checkpointing" section
  bool cpu_checkpointing = false;  // its cpu_checkpointing
  int64_t host_checkpoint_blocks = -1;  // its cpu_checkpointing_layers (-1: unset, every block's)
  int64_t tiled_mlp_tokens = 0;
  int64_t tiled_loss_tokens = 0;
  const char* allocator_conf = nullptr;  // PYTORCH_CUDA_ALLOC_CONF as the rank saw it
};

// When the allocation failed: at start-up the model states alone (what
// activations take is not yet held, so only the states' settings are
// named), in training the states and the activations.
enum class MemoryPhase { start_up, training };

// `where`: "building the engine", "step 12", "the evaluation after step 12";
// `torch_message`: the c10::OutOfMemoryError's text (its advice and link are
// left out: this says what applies to Stratum).
std::string explain_out_of_memory(const std::string& where, const std::string& torch_message,
                                  const MemorySettings& s, MemoryPhase phase = MemoryPhase::training);

}  // namespace stratum
