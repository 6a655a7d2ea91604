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

// cpu_checkpointing's pinned host memory, checked before a step's inputs go
// down: past the host's RAM the kernel's out-of-memory killer would end the
// rank with no word of why. `blocks` inputs of `bytes_per_block` each (as
// held: nn::to_host_pieces' pieces), of which `held_per_block` are held
// already (an earlier, shorter step's, cached), on each of `local_ranks`
// ranks of the host, against `available` bytes (host_memory_available) less
// a reserve.
struct HostCheckpointNeed {
  int64_t blocks = 0, bytes_per_block = 0, held_per_block = 0, tokens = 0;
  int local_ranks = 1;
  int64_t available = 0;  // 0: unknown, nothing checked
};
// "" when it fits; else what is short and the cpu_checkpointing_layers that fits.
std::string host_checkpoint_shortfall(const HostCheckpointNeed& need);
// The host's MemAvailable (/proc/meminfo) in bytes; 0 when unknown.
int64_t host_memory_available();

}  // namespace stratum
