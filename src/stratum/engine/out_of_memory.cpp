#include "stratum/engine/out_of_memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace stratum {
namespace {

// torch's account without its closing advice (expandable segments, a link).
std::string torch_account(const std::string& message) {
  std::string m = message.substr(0, message.find(" If reserved but unallocated"));
  if (const size_t end = m.find("\nException raised from"); end != std::string::npos) m = m.substr(0, end);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

std::string preset_of(const MemorySettings& s) { return s.model.empty() ? std::string("<preset>") : s.model; }

// The run's own shape and settings: the estimate beside this run's peak.
std::string estimate_command(const MemorySettings& s) {
  std::string c = "stratum-estimate --model " + preset_of(s) + " --seq " + std::to_string(s.seq) + " --micro-batch " +
                  std::to_string(s.micro_batch);
  if (s.checkpointing) c += " --checkpointing";
  if (s.checkpointing && s.cpu_checkpointing) c += " --cpu-checkpointing";
  if (s.checkpointing && s.cpu_checkpointing && s.host_checkpoint_blocks >= 0)
    c += " --cpu-checkpointing-layers " + std::to_string(s.host_checkpoint_blocks);
  if (s.tiled_mlp_tokens > 0) c += " --set tiled_mlp_tokens=" + std::to_string(s.tiled_mlp_tokens);
  if (s.tiled_loss_tokens > 0) c += " --set tiled_loss_tokens=" + std::to_string(s.tiled_loss_tokens);
  return c;
}

// The settings that shrink the model states (parameters, gradients, optimizer) on a GPU.
void state_ways(const MemorySettings& s, std::vector<std::string>& ways) {
  if (s.zero_stage < 3) ways.push_back("\"zero_optimization\": {\"stage\": 3} (parameters partitioned)");
  if (!s.offload_optimizer)
    ways.push_back("\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}} (the optimizer on the host)");
  if (s.zero_stage == 3 && s.offload_optimizer && !s.offload_param)
    ways.push_back("\"zero_optimization\": {\"offload_param\": {\"device\": \"cpu\"}} (the parameter shard on the host)");
}

// `ways` under `heading`, or `none_left` when the run uses them all.
void append_ways(std::string& out, const std::vector<std::string>& ways, const char* heading, const char* none_left) {
  if (ways.empty()) {
    out += std::string("\n") + none_left;
    return;
  }
  out += std::string("\n") + heading;
  for (const std::string& w : ways) out += "\n  - " + w;
}

}  // namespace

std::string explain_out_of_memory(const std::string& where, const std::string& torch_message,
                                  const MemorySettings& s, MemoryPhase phase) {
  std::vector<std::string> ways;
  if (phase == MemoryPhase::start_up) {
    state_ways(s, ways);
    std::string out = where + ": the GPU ran out of memory holding the model states: " + torch_account(torch_message);
    append_ways(out, ways, "What shrinks the model states on a GPU, not in use in this run:",
                "Every setting Stratum has for the model states is in use: more GPUs (ZeRO's data-parallel ranks, "
                "pipeline stages or tensor parallelism).");
    out += "\n`stratum-estimate --model " + preset_of(s) + "` gives a GPU's model states at each ZeRO stage and offload.";
    return out;
  }
  if (s.micro_batch > 1)
    ways.push_back("a smaller train_micro_batch_size_per_gpu (now " + std::to_string(s.micro_batch) +
                   "; gradient_accumulation_steps keeps the batch)");
  if (!s.checkpointing)
    ways.push_back("an \"activation_checkpointing\" section (each block's input kept, the rest recomputed)");
  const bool long_sequence = s.seq >= 16384;
  if (long_sequence && (s.tiled_mlp_tokens <= 0 || s.tiled_loss_tokens <= 0))
    ways.push_back("--set tiled_mlp_tokens=8192 --set tiled_loss_tokens=8192 (no full-sequence MLP or logits)");
  if (s.checkpointing && !s.cpu_checkpointing && long_sequence)
    ways.push_back("\"activation_checkpointing\": {\"cpu_checkpointing\": true} (the checkpoints in host memory; "
                   "with \"cpu_checkpointing_layers\": N only the first N blocks')");
  if (s.checkpointing && s.cpu_checkpointing && s.host_checkpoint_blocks >= 0 && long_sequence)
    ways.push_back("a larger \"activation_checkpointing\": {\"cpu_checkpointing_layers\"} (now " +
                   std::to_string(s.host_checkpoint_blocks) + "; more blocks' checkpoints in host memory), or none "
                   "to put every block's there");
  state_ways(s, ways);
  const std::string conf = s.allocator_conf ? s.allocator_conf : "";
  if (s.allocator_conf && conf.find("expandable_segments:True") == std::string::npos)
    ways.push_back("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (yours is '" + conf +
                   "'; Stratum's default when unset, so that freed blocks are not stranded)");

  std::string out = where + ": the GPU ran out of memory: " + torch_account(torch_message);
  append_ways(out, ways, "What lowers a rank's peak, not in use in this run:",
              "Every setting Stratum has for a rank's peak is in use: more GPUs (pipeline, tensor or context "
              "parallelism) or a shorter sequence.");
  out += "\n`" + estimate_command(s) + "` estimates a rank's memory at each ZeRO stage and offload for this run.";
  return out;
}

std::string host_checkpoint_shortfall(const HostCheckpointNeed& n) {
  if (n.available <= 0 || n.blocks <= 0 || n.bytes_per_block <= 0) return "";
  // Kept free: the process's own growth and the pinned staging buffers.
  const int64_t reserve = int64_t{1} << 30, room = std::max<int64_t>(0, n.available - reserve);
  const int64_t ranks = std::max(1, n.local_ranks), more = n.bytes_per_block - n.held_per_block;
  if (more <= 0) return "";
  const int64_t need = n.blocks * more * ranks;
  if (need <= room) return "";
  auto gib = [](int64_t b) { return static_cast<double>(b) / double(1ull << 30); };
  const int64_t fits = std::min(n.blocks - 1, room / (more * ranks));
  char text[640];
  std::snprintf(text, sizeof text,
                "cpu_checkpointing: the first %lld blocks' inputs take %.2f GiB more pinned host memory a rank "
                "(%.3f GiB each at %lld tokens), %.2f GiB for the %lld rank(s) on this host, but the host has "
                "%.2f GiB available (MemAvailable, beside what is already held; %.0f GiB kept free). Set "
                "\"activation_checkpointing\": {\"cpu_checkpointing_layers\": %lld} (the rest on the GPU), or a "
                "shorter sequence",
                (long long)n.blocks, gib(n.blocks * more), gib(n.bytes_per_block), (long long)n.tokens,
                gib(need), (long long)ranks, gib(n.available), gib(reserve), (long long)fits);
  return text;
}

int64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = 0;
    return fields >> kib ? kib * 1024 : 0;
  }
  return 0;
}

}  // namespace stratum
