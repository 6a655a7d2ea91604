#pragma once
// A micro-batch of packed instruction rows as tensors (packing.h says what
// each holds): tokens and targets int64 [rows, seq_len] (targets -100 where
// nothing is learned: masked tokens, example boundaries, padding),
// segment_ids int32 (the example within its row, -1 on padding) and
// position_ids int64 (restarting at 0 per example), contiguous on the CPU.
// Attention that keeps examples apart reads segment_ids.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "stratum/data/packing.h"

namespace stratum::data {

struct PackedBatch {
  at::Tensor tokens, targets, segment_ids, position_ids;
};

PackedBatch make_packed_batch(const InstructionFile& file, const PackingPlan& plan, const std::vector<int64_t>& rows,
                              int32_t pad_id = 0);

}  // namespace stratum::data
