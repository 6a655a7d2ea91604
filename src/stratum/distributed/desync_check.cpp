#include "stratum/distributed/desync_check.h"

#include <c10/core/ScalarType.h>

namespace stratum::distributed {
namespace {

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

std::array<int64_t, CollectiveFingerprint::kWords> CollectiveFingerprint::pack() const {
  return {static_cast<int64_t>(op), bytes, dtype, reduce_op, root, seq};
}

CollectiveFingerprint CollectiveFingerprint::unpack(const int64_t* w) {
  CollectiveFingerprint f;
  f.op = static_cast<CommOp>(w[0]);
  f.bytes = w[1];
  f.dtype = w[2];
  f.reduce_op = w[3];
  f.root = w[4];
  f.seq = w[5];
  return f;
}

bool CollectiveFingerprint::same_call(const CollectiveFingerprint& o) const { return pack() == o.pack(); }

std::string CollectiveFingerprint::call() const {
  std::string out = comm_op_name(op);
  if (op == CommOp::barrier) return out;
  out += " (" + format_bytes(bytes);
  if (dtype >= 0) out += std::string(" ") + c10::toString(static_cast<at::ScalarType>(dtype));
  if (reduce_op >= 0) out += std::string(", ") + reduce_op_name(static_cast<ReduceOp>(reduce_op));
  if (root >= 0) out += ", root " + std::to_string(root);
  return out + ")";
}

std::string find_desync(const std::vector<CollectiveFingerprint>& by_rank, const std::string& group_name,
                        const std::vector<int64_t>& global_ranks) {
  bool agree = true;
  for (const auto& f : by_rank) agree = agree && f.same_call(by_rank.front());
  if (agree) return "";

  // Ranks with the same call are listed together, in order of first appearance.
  struct Variant {
    const CollectiveFingerprint* call;
    std::vector<int64_t> ranks;
  };
  std::vector<Variant> variants;
  for (size_t i = 0; i < by_rank.size(); ++i) {
    const int64_t who = i < global_ranks.size() ? global_ranks[i] : static_cast<int64_t>(i);
    auto it = variants.begin();
    while (it != variants.end() && !it->call->same_call(by_rank[i])) ++it;
    if (it == variants.end()) variants.push_back({&by_rank[i], {who}});
    else it->ranks.push_back(who);
  }
  const int64_t seq = by_rank.front().seq;
  std::string msg = "desync on group '" + group_name + "' [ranks " + rank_list(global_ranks) + "] at collective #" +
                    std::to_string(seq) + ": ";
  for (size_t v = 0; v < variants.size(); ++v) {
    const auto& var = variants[v];
    msg += (v ? "; " : "") + std::string(var.ranks.size() > 1 ? "ranks " : "rank ") + rank_list(var.ranks) +
           " issued " + var.call->call();
    // A different count means a rank skipped or added a collective earlier.
    if (var.call->seq != seq) msg += " as its collective #" + std::to_string(var.call->seq);
  }
  return msg + " (every rank of a group must issue the same collectives in the same order)";
}

}  // namespace stratum::distributed
