#pragma once
// Context parallelism in the engine: every rank of a context-parallel group
// reads the same micro-batch, and the engine keeps this rank's tokens of it
// (nn/context_parallel/context_split.h) with their positions in the whole
// sequence and the shard attention meets the other ranks through.
#include <string>
#include <vector>

#include "stratum/config/config.h"
#include "stratum/distributed/process_grid.h"
#include "stratum/engine/pipeline_stages.h"
#include "stratum/nn/context_parallel/context_parallel.h"

namespace stratum::engine_detail {

// The grid's context-parallel groups with the config's method (not enabled
// when context_parallel.size is 1).
nn::cp::ContextParallel context_parallel_of(const Config& config, const distributed::ProcessGrid& grid);

// Micro-batch `index` of `what` (train_batch, eval_batch) cut to this rank's
// tokens: inputs and labels at its positions, segment and position ids
// (made for an unpacked row: one segment, positions 0 .. T - 1) at them too,
// loss_tokens recounted, and the shard set (MicroBatch::context). The whole
// layout is checked first, as micro_batch_layout checks it. `multiple`: what
// the rank's part must be a multiple of (the tensor-parallel size under
// sequence parallelism). Throws Error naming the micro-batch and the numbers
// when its length does not split.
MicroBatch context_shard(const MicroBatch& whole, const nn::cp::ContextParallel& cp, int64_t multiple, int index,
                         const char* what, c10::Device device);

// What a model of `heads` query and `kv_heads` key/value heads, trained at
// `seq_len` tokens, cannot do under the config's context parallelism (the
// Ulysses heads, the split of the sequence, attention dropout under the
// ring), each naming the key and the numbers. Empty when it can.
std::vector<std::string> context_parallel_problems(const Config& config, int64_t heads, int64_t kv_heads,
                                                   int64_t seq_len, double attention_dropout);

}  // namespace stratum::engine_detail
