#include "stratum/distributed/comms_logger.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace stratum::distributed {
namespace {

bool key_less(const CommStats& s, CommOp op, int64_t bytes) {
  return s.op != op ? static_cast<int>(s.op) < static_cast<int>(op) : s.bytes < bytes;
}

// DeepSpeed's table: every column 20 characters wide, left-aligned; a row
// ends at its last cell's text (no trailing blanks).
void append_cell(std::string& out, const std::string& text, bool last = false) {
  out += text;
  if (last) out += '\n';
  else out.append(text.size() < 20 ? 20 - text.size() : 1, ' ');
}

std::string fixed2(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

}  // namespace

double busbw_factor(CommOp op, int group_size) {
  const double n = group_size;
  switch (op) {
    case CommOp::all_reduce: return n > 0 ? 2.0 * (n - 1) / n : 0.0;
    case CommOp::reduce_scatter:
    case CommOp::all_gather: return n > 0 ? (n - 1) / n : 0.0;
    case CommOp::broadcast:
    case CommOp::send:
    case CommOp::recv:
    case CommOp::batch_p2p: return 1.0;
    case CommOp::barrier: return 0.0;
  }
  return 0.0;
}

double gbps(double bytes, double seconds) { return seconds > 0 ? bytes * 8.0 / seconds / 1e9 : 0.0; }

void CommsLog::record(CommOp op, int64_t bytes, double seconds, int group_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::partition_point(stats_.begin(), stats_.end(),
                                 [&](const CommStats& s) { return key_less(s, op, bytes); });
  if (it == stats_.end() || it->op != op || it->bytes != bytes) {
    CommStats fresh;
    fresh.op = op;
    fresh.bytes = bytes;
    fresh.min_seconds = seconds;
    fresh.max_seconds = seconds;
    it = stats_.insert(it, fresh);
  }
  it->count += 1;
  it->total_seconds += seconds;
  it->min_seconds = std::min(it->min_seconds, seconds);
  it->max_seconds = std::max(it->max_seconds, seconds);
  it->bus_bytes += static_cast<double>(bytes) * busbw_factor(op, group_size);
}

std::vector<CommStats> CommsLog::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

int64_t CommsLog::total_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& s : stats_) n += s.count;
  return n;
}

void CommsLog::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.clear();
}

std::string CommsLog::summary() const {
  const std::vector<CommStats> rows = stats();
  std::string out;
  for (const char* h : {"Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
                        "tput_avg (Gbps)"})
    append_cell(out, h);
  append_cell(out, "busbw_avg (Gbps)", true);
  for (size_t i = 0; i < rows.size(); ++i) {
    const CommStats& s = rows[i];
    if (i == 0 || rows[i - 1].op != s.op) out += std::string(comm_op_name(s.op)) + '\n';
    append_cell(out, "");
    append_cell(out, format_bytes(s.bytes));
    append_cell(out, std::to_string(s.count));
    append_cell(out, fixed2(s.total_seconds * 1e3));
    append_cell(out, fixed2(s.avg_seconds() * 1e3));
    append_cell(out, fixed2(s.algbw_gbps()));
    append_cell(out, fixed2(s.busbw_gbps()), true);
  }
  return out;
}

nlohmann::json CommsLog::to_json() const {
  nlohmann::json summary = nlohmann::json::object();
  int64_t total = 0;
  for (const CommStats& s : stats()) {
    total += s.count;
    summary[comm_op_name(s.op)][std::to_string(s.bytes)] = {
        {"count", s.count},
        {"total_latency_ms", s.total_seconds * 1e3},
        {"avg_latency_ms", s.avg_seconds() * 1e3},
        {"min_latency_ms", s.min_seconds * 1e3},
        {"max_latency_ms", s.max_seconds * 1e3},
        {"tput_avg_gbps", s.algbw_gbps()},
        {"busbw_avg_gbps", s.busbw_gbps()},
        {"msg_size_bytes", s.bytes},
        {"msg_size_str", format_bytes(s.bytes)},
    };
  }
  return {{"summary", summary}, {"total_count", total}};
}

std::string format_comm_op_line(CommOp op, int64_t bytes, double seconds, int group_size) {
  const double algbw = gbps(static_cast<double>(bytes), seconds);
  return std::string("comm op: ") + comm_op_name(op) + " | time (ms): " + fixed2(seconds * 1e3) +
         " | msg size: " + format_bytes(bytes) + " | algbw (Gbps): " + fixed2(algbw) +
         " | busbw (Gbps): " + fixed2(algbw * busbw_factor(op, group_size));
}

}  // namespace stratum::distributed
