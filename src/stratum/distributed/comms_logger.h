#pragma once
// The comms logger's record store: per (operation, message size) how many
// times it ran and how long it took, and the table DeepSpeed prints with
// `comms_logger.log_summary()`. Shared by every logged communicator of a
// process (world, dp, tp, ...), hence thread-safe.
//
// Sizes follow nccl-tests: all_gather counts its output (full) bytes,
// reduce_scatter its input (full) bytes, batch_p2p the sum of its tensors.
// algbw = bytes / latency; busbw = algbw x busbw_factor(op, group size), the
// bandwidth a ring would need on its busiest link, comparable across sizes.
// Bandwidths are in Gbps (gigabits per second) as in DeepSpeed's table.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratum/distributed/communicator.h"

namespace stratum::distributed {

// nccl-tests' factors: all_reduce 2(n-1)/n; reduce_scatter, all_gather (n-1)/n;
// broadcast and point-to-point 1; barrier 0 (it moves no payload).
double busbw_factor(CommOp op, int group_size);
// Gigabits per second; 0 when no time was measured.
double gbps(double bytes, double seconds);

// Every record of one (operation, message size).
struct CommStats {
  CommOp op;
  int64_t bytes = 0;       // of one operation
  int64_t count = 0;
  double total_seconds = 0;
  double min_seconds = 0;
  double max_seconds = 0;
  double bus_bytes = 0;    // sum of bytes x busbw_factor over the records

  double avg_seconds() const { return count ? total_seconds / count : 0.0; }
  // Throughput over all records: total bytes / total latency (not a mean of
  // per-op rates, which a few tiny latencies would dominate).
  double algbw_gbps() const { return gbps(static_cast<double>(bytes) * count, total_seconds); }
  double busbw_gbps() const { return gbps(bus_bytes, total_seconds); }
};

class CommsLog {
 public:
  void record(CommOp op, int64_t bytes, double seconds, int group_size);
  // Ordered by operation (enum order), then message size.
  std::vector<CommStats> stats() const;
  int64_t total_count() const;
  void reset();

  // DeepSpeed's layout: a header, then per operation a line with its name and
  // one row per message size:
  //   Comm. Op  Message Size  Count  Total Latency(ms)  Avg Latency(ms)  tput_avg (Gbps)  busbw_avg (Gbps)
  std::string summary() const;
  // {"summary": {op: {"<bytes>": {count, total_latency_ms, avg_latency_ms,
  // min_latency_ms, max_latency_ms, tput_avg_gbps, busbw_avg_gbps,
  // msg_size_bytes, msg_size_str}}}, "total_count": n}: DeepSpeed's
  // log_all(return_dict=True) shape, plus min/max.
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mutex_;
  std::vector<CommStats> stats_;  // kept sorted
};

// One verbose line, as DeepSpeed prints it:
// "comm op: all_reduce | time (ms): 0.12 | msg size: 4.0 MiB | algbw (Gbps): 1.23 | busbw (Gbps): 2.34"
std::string format_comm_op_line(CommOp op, int64_t bytes, double seconds, int group_size);

}  // namespace stratum::distributed
