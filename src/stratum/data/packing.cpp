#include "stratum/data/packing.h"

#include "stratum/core/error.h"

namespace stratum::data {

PackingPlan pack_examples(const std::vector<int64_t>& example_lengths, int64_t seq_len) {
  if (seq_len < 1) throw Error("packing: seq_len must be at least 1, got " + std::to_string(seq_len));
  const int64_t capacity = seq_len + 1;
  PackingPlan plan;
  plan.seq_len = seq_len;
  std::vector<PackedSegment> row;
  int64_t used = 0;
  auto close = [&] {
    if (row.empty()) return;
    plan.stats.padding_tokens += capacity - used;
    plan.rows.push_back(std::move(row));
    row.clear();
    used = 0;
  };
  for (size_t i = 0; i < example_lengths.size(); ++i) {
    int64_t length = example_lengths[i];
    if (length < 1) throw Error("packing: example " + std::to_string(i) + " is empty");
    if (length > capacity) {
      ++plan.stats.truncated_examples;
      plan.stats.truncated_tokens += length - capacity;
      length = capacity;
    }
    if (used + length > capacity) close();
    row.push_back(PackedSegment{static_cast<int64_t>(i), length});
    used += length;
    ++plan.stats.examples;
    plan.stats.tokens += length;
  }
  close();
  plan.stats.rows = static_cast<int64_t>(plan.rows.size());
  return plan;
}

PackedRowData fill_packed_row(const InstructionFile& file, const PackingPlan& plan, int64_t row, int32_t pad_id) {
  if (row < 0 || row >= static_cast<int64_t>(plan.rows.size()))
    throw Error(file.path() + ": packed row " + std::to_string(row) + " of " + std::to_string(plan.rows.size()));
  const int64_t capacity = plan.seq_len + 1;
  std::vector<int64_t> tokens(static_cast<size_t>(capacity), pad_id), positions(static_cast<size_t>(capacity), 0);
  std::vector<int32_t> segments(static_cast<size_t>(capacity), -1);
  std::vector<uint8_t> mask(static_cast<size_t>(capacity), 0);
  int64_t at = 0;
  int32_t index = 0;
  for (const PackedSegment& s : plan.rows[static_cast<size_t>(row)]) {
    file.read(s.example, 0, s.length, tokens.data() + at, mask.data() + at);
    for (int64_t k = 0; k < s.length; ++k) {
      segments[static_cast<size_t>(at + k)] = index;
      positions[static_cast<size_t>(at + k)] = k;
    }
    at += s.length;
    ++index;
  }
  PackedRowData out;
  const auto n = static_cast<size_t>(plan.seq_len);
  out.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n));
  out.position_ids.assign(positions.begin(), positions.begin() + static_cast<std::ptrdiff_t>(n));
  out.segment_ids.assign(segments.begin(), segments.begin() + static_cast<std::ptrdiff_t>(n));
  out.targets.assign(n, -100);
  for (size_t p = 0; p < n; ++p)
    if (segments[p] >= 0 && segments[p + 1] == segments[p] && mask[p + 1]) out.targets[p] = tokens[p + 1];
  return out;
}

}  // namespace stratum::data
