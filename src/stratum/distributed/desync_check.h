#pragma once
// The comms logger's debug mode: before each collective every rank of a group
// shares a fingerprint of the call it is about to issue, and all compare them.
// Ranks that disagree (one issues all_gather while the others all_reduce,
// sizes differ, one skipped a call) would otherwise hang inside the backend or,
// worse, exchange mismatched data silently; here the first mismatch is named,
// rank by rank. This file is the pure part (fingerprints and the verdict);
// logged_communicator.cpp does the exchange.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "stratum/distributed/communicator.h"

namespace stratum::distributed {

// Exit status of a job ended by a desync (next to kExitCommTimeout = 124).
constexpr int kExitDesync = 123;

class CommDesync : public Error {
 public:
  explicit CommDesync(const std::string& what) : Error(what) {}
};

// What a rank does on a desync: end the whole job (the default: other ranks
// would hang), or throw CommDesync (for tests and callers that recover).
enum class DesyncAction { abort_job, throw_error };

// The call a rank is about to issue, as a few int64 words every rank exchanges.
struct CollectiveFingerprint {
  static constexpr int kWords = 6;

  CommOp op = CommOp::barrier;
  int64_t bytes = 0;      // the comms-logger size (all_gather: output; reduce_scatter: input)
  int64_t dtype = -1;     // at::ScalarType, -1 for none (barrier)
  int64_t reduce_op = -1; // ReduceOp for reductions, else -1
  int64_t root = -1;      // broadcast's root, else -1
  int64_t seq = 0;        // collectives issued so far on this group, this one included

  std::array<int64_t, kWords> pack() const;
  static CollectiveFingerprint unpack(const int64_t* words);
  bool same_call(const CollectiveFingerprint& other) const;
  // "all_reduce (4.0 KiB Float, sum)", "broadcast (1.0 KiB Half, root 0)", "barrier"
  std::string call() const;
};

// by_rank[i] is group rank i's fingerprint; global_ranks names them in the
// report. Empty when all agree, else e.g.
// "desync on group 'dp' [ranks 0, 1] at collective #3: rank 0 issued
//  all_reduce (4.0 KiB Float, sum); rank 1 issued all_gather (8.0 KiB Float)"
// (ranks that issued the same call are listed together).
std::string find_desync(const std::vector<CollectiveFingerprint>& by_rank, const std::string& group_name,
                        const std::vector<int64_t>& global_ranks);

}  // namespace stratum::distributed
