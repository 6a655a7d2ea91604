#include "stratum/engine/param_runs.h"

#include <algorithm>
#include <string>

#include "stratum/core/error.h"

namespace stratum {

std::vector<std::vector<optim::ParamRun>> segment_param_runs(const zero::FlatLayout& layout,
                                                             const std::vector<zero::FlatPiece>& pieces,
                                                             size_t segments) {
  const std::vector<zero::ParamSlot>& slots = layout.params();
  // Parameters by flat offset (they do not overlap): each piece finds its first one by binary search.
  std::vector<int64_t> order;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].numel > 0) order.push_back(static_cast<int64_t>(i));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return slots[a].offset < slots[b].offset; });

  std::vector<std::vector<optim::ParamRun>> runs(segments);
  for (const zero::FlatPiece& piece : pieces) {
    if (piece.segment < 0 || static_cast<size_t>(piece.segment) >= segments)
      throw Error("segment_param_runs: a piece names segment " + std::to_string(piece.segment) + " of " +
                  std::to_string(segments));
    const int64_t begin = piece.flat_offset, end = piece.flat_offset + piece.numel;
    // The first parameter that ends after the piece begins.
    auto it = std::partition_point(order.begin(), order.end(),
                                   [&](int64_t i) { return slots[i].offset + slots[i].numel <= begin; });
    for (; it != order.end() && slots[*it].offset < end; ++it) {
      const zero::ParamSlot& s = slots[*it];
      const int64_t from = std::max(begin, s.offset), to = std::min(end, s.offset + s.numel);
      runs[piece.segment].push_back(optim::ParamRun{*it, piece.segment_offset + (from - begin), to - from});
    }
  }
  for (auto& r : runs)
    std::sort(r.begin(), r.end(), [](const optim::ParamRun& a, const optim::ParamRun& b) { return a.offset < b.offset; });
  return runs;
}

std::vector<ParamPiece> param_pieces(const zero::FlatLayout& layout, const std::vector<zero::FlatPiece>& pieces,
                                     int param) {
  const zero::ParamSlot& s = layout.params().at(param);
  std::vector<ParamPiece> out;
  for (const zero::FlatPiece& piece : pieces) {
    const int64_t from = std::max(piece.flat_offset, s.offset);
    const int64_t to = std::min(piece.flat_offset + piece.numel, s.offset + s.numel);
    if (from >= to) continue;
    out.push_back(ParamPiece{piece.segment, piece.segment_offset + (from - piece.flat_offset), from - s.offset, to - from});
  }
  return out;
}

}  // namespace stratum
