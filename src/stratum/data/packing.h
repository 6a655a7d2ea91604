#pragma once
// Instruction examples packed into training rows. Plain C++, no torch.
//
// Policy. A row holds seq_len + 1 tokens (seq_len inputs and the targets
// shifted by one). Examples are taken in file order and packed greedily: an
// example goes into the current row when it fits in the room left, else the
// row is closed (the rest padded) and a new one starts. An example longer
// than a row is truncated to its first seq_len + 1 tokens, alone in its row;
// PackingStats counts those examples and the tokens cut.
//
// In a row, position p's target is the token at p + 1 when both belong to the
// same example and that token's loss mask is 1, else -100 (ignored): no
// example's first token is ever a target of the one before it, and padding
// never is. segment_ids[p] is the example's index within the row (0, 1, ...)
// and -1 on padding; position_ids[p] counts from 0 at each example's first
// token (0 on padding). Padding tokens are pad_id.
#include <cstdint>
#include <vector>

#include "stratum/data/instruction_file.h"

namespace stratum::data {

struct PackedSegment {
  int64_t example = 0;
  int64_t length = 0;  // tokens taken from the example's start
};

struct PackingStats {
  int64_t rows = 0, examples = 0, tokens = 0, padding_tokens = 0;
  int64_t truncated_examples = 0, truncated_tokens = 0;
};

struct PackingPlan {
  int64_t seq_len = 0;
  std::vector<std::vector<PackedSegment>> rows;
  PackingStats stats;
};

// Throws stratum::Error when seq_len < 1 or an example is empty.
PackingPlan pack_examples(const std::vector<int64_t>& example_lengths, int64_t seq_len);

// One packed row, as the policy above says; each vector has seq_len entries.
struct PackedRowData {
  std::vector<int64_t> tokens, targets, position_ids;
  std::vector<int32_t> segment_ids;
};
PackedRowData fill_packed_row(const InstructionFile& file, const PackingPlan& plan, int64_t row, int32_t pad_id = 0);

}  // namespace stratum::data
