#include "stratum/data/packed_batch.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace stratum::data {

PackedBatch make_packed_batch(const InstructionFile& file, const PackingPlan& plan, const std::vector<int64_t>& rows,
                              int32_t pad_id) {
  const auto b = static_cast<int64_t>(rows.size()), n = plan.seq_len;
  PackedBatch out;
  out.tokens = at::empty({b, n}, at::kLong);
  out.targets = at::empty({b, n}, at::kLong);
  out.segment_ids = at::empty({b, n}, at::kInt);
  out.position_ids = at::empty({b, n}, at::kLong);
  for (int64_t i = 0; i < b; ++i) {
    const PackedRowData row = fill_packed_row(file, plan, rows[static_cast<size_t>(i)], pad_id);
    std::copy(row.tokens.begin(), row.tokens.end(), out.tokens.data_ptr<int64_t>() + i * n);
    std::copy(row.targets.begin(), row.targets.end(), out.targets.data_ptr<int64_t>() + i * n);
    std::copy(row.segment_ids.begin(), row.segment_ids.end(), out.segment_ids.data_ptr<int32_t>() + i * n);
    std::copy(row.position_ids.begin(), row.position_ids.end(), out.position_ids.data_ptr<int64_t>() + i * n);
  }
  return out;
}

}  // namespace stratum::data
