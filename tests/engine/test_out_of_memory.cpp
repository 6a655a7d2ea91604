// A GPU out of memory in training: torch's account of the memory, then each
// setting that lowers a rank's peak which the run does not use, as the config
// or a flag names it, and the stratum-estimate command for the run.
#include <gtest/gtest.h>

#include <string>

#include "stratum/engine/out_of_memory.h"

using stratum::explain_out_of_memory;
using stratum::MemoryPhase;
using stratum::MemorySettings;

namespace {

// torch 2.11's text for the llama-8b step at 131,072 tokens on an H100 (2026-12-05).
const std::string kTorch =
    "CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 668.19 MiB "
    "is free. Including non-PyTorch memory, this process has 78.49 GiB memory in use. Of the allocated memory 61.70 "
    "GiB is allocated by PyTorch, and 14.12 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html)";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(OutOfMemory, NamesEverySettingTheRunDoesNotUse) {
  MemorySettings s;
  s.model = "llama-8b";
  s.seq = 131072;
  s.micro_batch = 2;
  const std::string m = explain_out_of_memory("step 3", kTorch, s);
  EXPECT_TRUE(has(m, "step 3: the GPU ran out of memory: CUDA out of memory. Tried to allocate 1024.00 MiB.")) << m;
  EXPECT_TRUE(has(m, "14.12 GiB is reserved by PyTorch but unallocated.")) << m;
  EXPECT_FALSE(has(m, "If reserved")) << m;  // torch's advice: this message gives Stratum's
  EXPECT_FALSE(has(m, "https://")) << m;
  for (const char* way : {"train_micro_batch_size_per_gpu (now 2;", "an \"activation_checkpointing\" section",
                          "--set tiled_mlp_tokens=8192 --set tiled_loss_tokens=8192", "{\"stage\": 3}",
                          "\"offload_optimizer\": {\"device\": \"cpu\"}"})
    EXPECT_TRUE(has(m, way)) << way << "\n" << m;
  EXPECT_TRUE(has(m, "`stratum-estimate --model llama-8b --seq 131072 --micro-batch 2` estimates")) << m;
  EXPECT_FALSE(has(m, "PYTORCH_CUDA_ALLOC_CONF")) << m;  // unset: Stratum's default is in force
}

TEST(OutOfMemory, LeavesOutWhatTheRunUsesAndSaysWhenNothingIsLeft) {
  MemorySettings s;
  s.model = "llama-8b";
  s.seq = 65536;
  s.zero_stage = 3;
  s.offload_optimizer = true;
  s.checkpointing = true;
  s.tiled_mlp_tokens = s.tiled_loss_tokens = 8192;
  std::string m = explain_out_of_memory("the evaluation after step 10", kTorch, s);
  EXPECT_TRUE(has(m, "cpu_checkpointing\": true")) << m;  // the one left at this length
  EXPECT_FALSE(has(m, "train_micro_batch_size_per_gpu")) << m;
  EXPECT_FALSE(has(m, "{\"stage\": 3}")) << m;
  EXPECT_TRUE(has(m, "--seq 65536 --micro-batch 1 --checkpointing --set tiled_mlp_tokens=8192 "
                     "--set tiled_loss_tokens=8192`"))
      << m;
  EXPECT_TRUE(has(m, "\"offload_param\": {\"device\": \"cpu\"}")) << m;
  s.cpu_checkpointing = s.offload_param = true;
  m = explain_out_of_memory("step 1", kTorch, s);
  EXPECT_TRUE(has(m, "Every setting Stratum has for a rank's peak is in use")) << m;
  EXPECT_TRUE(has(m, "--checkpointing --cpu-checkpointing")) << m;
  // Only the first blocks' checkpoints on the host: more of them is the way left.
  s.host_checkpoint_blocks = 20;
  m = explain_out_of_memory("step 1", kTorch, s);
  EXPECT_TRUE(has(m, "a larger \"activation_checkpointing\": {\"cpu_checkpointing_layers\"} (now 20;")) << m;
  EXPECT_TRUE(has(m, "--cpu-checkpointing --cpu-checkpointing-layers 20 --set")) << m;
}

TEST(OutOfMemory, NamesTheUsersAllocatorSettingsWithoutExpandableSegments) {
  MemorySettings s;
  s.seq = 1024;
  s.zero_stage = 3;
  s.offload_optimizer = s.checkpointing = true;
  s.allocator_conf = "max_split_size_mb:512";
  const std::string m = explain_out_of_memory("step 1", kTorch, s);
  EXPECT_TRUE(has(m, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (yours is 'max_split_size_mb:512'")) << m;
  EXPECT_FALSE(has(m, "tiled_mlp_tokens")) << m;  // a short sequence: tiling is not what helps
  s.allocator_conf = "expandable_segments:True";
  EXPECT_FALSE(has(explain_out_of_memory("step 1", kTorch, s), "PYTORCH_CUDA_ALLOC_CONF"));
}

// At start-up only the model states are held: the settings that shrink them,
// not the activations'.
TEST(OutOfMemory, AtStartUpNamesOnlyWhatShrinksTheModelStates) {
  MemorySettings s;
  s.model = "qwen3-30b-a3b";
  s.seq = 4096;
  s.micro_batch = 4;
  std::string m = explain_out_of_memory("building the engine", kTorch, s, MemoryPhase::start_up);
  EXPECT_TRUE(has(m, "building the engine: the GPU ran out of memory holding the model states: CUDA out of memory."))
      << m;
  EXPECT_TRUE(has(m, "{\"stage\": 3}")) << m;
  EXPECT_TRUE(has(m, "\"offload_optimizer\"")) << m;
  EXPECT_FALSE(has(m, "\"offload_param\"")) << m;  // after ZeRO-3 with the optimizer offloaded
  EXPECT_FALSE(has(m, "train_micro_batch_size_per_gpu")) << m;
  EXPECT_FALSE(has(m, "activation_checkpointing")) << m;
  EXPECT_TRUE(has(m, "`stratum-estimate --model qwen3-30b-a3b` gives a GPU's model states")) << m;
  s.zero_stage = 3;
  s.offload_optimizer = true;
  EXPECT_TRUE(has(explain_out_of_memory("building the engine", kTorch, s, MemoryPhase::start_up),
                  "\"offload_param\": {\"device\": \"cpu\"}"));
  s.offload_param = true;
  EXPECT_TRUE(has(explain_out_of_memory("building the engine", kTorch, s, MemoryPhase::start_up),
                  "Every setting Stratum has for the model states is in use"));
}

// cpu_checkpointing past the host's RAM: named before the inputs go down
// (else the kernel's out-of-memory killer ends the rank with no word), with
// the cpu_checkpointing_layers that fits. llama-8b at 192K tokens on the H100
// machine: 15 inputs of 1.5 GiB against the 17.7 GiB left beside its states.
TEST(OutOfMemory, HostCheckpointsPastTheHostsMemoryAreNamed) {
  const int64_t gib = int64_t{1} << 30;
  stratum::HostCheckpointNeed n;
  n.blocks = 15;
  n.bytes_per_block = 3 * gib / 2;
  n.tokens = 196608;
  n.available = 17 * gib + 7 * gib / 10;
  const std::string m = stratum::host_checkpoint_shortfall(n);
  EXPECT_TRUE(has(m, "the first 15 blocks' inputs take 22.50 GiB more pinned host memory a rank (1.500 GiB each at "
                     "196608 tokens), 22.50 GiB for the 1 rank(s) on this host, but the host has 17.70 GiB available"))
      << m;
  EXPECT_TRUE(has(m, "{\"cpu_checkpointing_layers\": 11} (the rest on the GPU)")) << m;  // 11 x 1.5 <= 16.7
  n.blocks = 11;
  EXPECT_EQ(stratum::host_checkpoint_shortfall(n), "");
  n.local_ranks = 2;  // two ranks of the host each keep theirs
  EXPECT_TRUE(has(stratum::host_checkpoint_shortfall(n), "\"cpu_checkpointing_layers\": 5}"));
  n.held_per_block = n.bytes_per_block;  // held since an earlier step: nothing more
  EXPECT_EQ(stratum::host_checkpoint_shortfall(n), "");
  n.available = 0;  // unknown: not checked
  n.held_per_block = 0;
  EXPECT_EQ(stratum::host_checkpoint_shortfall(n), "");
  EXPECT_GT(stratum::host_memory_available(), 0) << "/proc/meminfo's MemAvailable";
}
