#pragma once
// A rank's flight recorder: a fixed ring of its last collectives and
// point-to-point operations (which group, the op's number on that group, the
// op, its size, when it started and when it ended, or that it is still open),
// so that when a job hangs the report can say which ranks never arrived at the
// operation the others wait in, and what those ranks did last
// (flight_report.h reads the files; recording_communicator.h records).
//
// Cheap: the ring and the group table are allocated once; an operation costs
// an uncontended lock, two clock reads and a copy of a few words. Torch-free.
//
// The file: with a path set (init() sets `<STRATUM_FLIGHT_DIR>/rank<N>.txt`),
// a background thread rewrites it every `flush_every` period when something
// changed (write to a temporary, rename), so a rank that is stopped (SIGSTOP,
// a hung kernel, a deadlock) has left its state of at most one period before;
// it is also written when the job aborts (a collective timeout) and when the
// recorder goes (the rank ends). Text, one record a line:
//   stratum-flight 1
//   rank 1 world 2 pid 4242 host node3
//   written 1733377000.123456 periodic
//   group 0 issued 12 completed 11 backend mpi ranks 0,1 name world
//   p2p 1 peer 0 sent 40 received 38
//   op 31 group 0 seq 12 all_reduce bytes 4096 peer -1 sent 0 received 0 start 1733377000.100000 wait - end -
// (`end -`: still open; `wait`: when a thread began to block on it; times
// are wall-clock seconds, comparable between the ranks of one host; `peer`:
// the world rank of a send's or recv's only partner; `sent`/`received` on an
// op: how many sends to / receives from that partner on the group this rank
// had issued with this one, 0 when the op has none that way; `p2p` lines: the
// totals by partner, so a peer's file says whether it sent what one waits for.)
// Rewritten periodically rather than from signal handlers: writing a file is
// not async-signal-safe, a SIGSTOPped rank runs no handler at all, and a
// SIGTERM or SIGKILL from the shim or mpirun leaves the last second's state.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace stratum::distributed {

struct FlightEntry {
  uint64_t id = 0;       // this rank's operation count, from 1; 0 marks an empty slot
  uint64_t seq = 0;      // the op's number on its group, as timeout reports give it ("all_reduce #12")
  int group = -1;        // index into the recorder's groups
  const char* op = "";   // a static name (comm_op_name)
  int64_t bytes = 0;
  int64_t peer = -1;     // world rank of a send's or recv's only partner, else -1
  uint64_t sent = 0;     // sends to `peer` on the group so far, this op's included (0: it sends none)
  uint64_t received = 0; // receives from `peer` likewise
  int64_t start_us = 0;  // wall clock, microseconds since the epoch
  int64_t wait_us = 0;   // when a thread began to block on it (0: nobody has)
  int64_t end_us = 0;    // 0 while open
};

struct FlightGroup {
  std::string name;             // "world", "dp", ... (may hold spaces: last on its line in the file)
  std::string backend;          // "mpi" or "nccl": the worlds of both share a name
  std::vector<int64_t> ranks;   // world ranks of its members, by group rank
  uint64_t issued = 0;          // highest seq this rank issued on it
  uint64_t completed = 0;       // highest seq this rank saw complete
  std::vector<uint64_t> sent, received;  // point-to-point totals, by group rank of the partner
};

class FlightRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 256;

  FlightRecorder(int rank, int world_size, size_t capacity = kDefaultCapacity);
  ~FlightRecorder();  // stops the flusher and writes the file a last time ("exit")
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  int rank() const { return rank_; }
  size_t capacity() const { return ring_.size(); }

  // A group's index; the same (name, backend, members) twice gives the same index.
  int add_group(const std::string& name, const std::string& backend, const std::vector<int64_t>& world_ranks);
  // Counts a send to (or receive from) group rank `peer` of `group`: call it
  // for every tensor of a point-to-point call before begin().
  void count_p2p(int group, int peer, bool send);
  // Records an operation issued now; returns its id for end(). `peer`: the
  // group rank of a point-to-point op's only partner (-1: none or several);
  // `sends`/`receives`: whether the op sends to / receives from it.
  uint64_t begin(int group, uint64_t seq, const char* op, int64_t bytes, int peer = -1, bool sends = false,
                 bool receives = false);
  // A thread begins to block on it (the first time only).
  void waiting(uint64_t id);
  // It completed now (nothing when its slot was reused since, or it ended already).
  void end(uint64_t id);
  // Forgets an operation whose issue failed (its slot becomes empty; its
  // point-to-point counts stay: such a call is an error on every rank).
  void drop(uint64_t id);

  std::vector<FlightEntry> entries() const;  // oldest first, empty slots left out
  std::vector<FlightGroup> groups() const;
  // The file's text; `reason`: one word ("periodic", "timeout", "abort", "exit", ...).
  std::string format(const std::string& reason) const;

  // Where write_file() writes ("" : nowhere).
  void set_file(const std::string& path);
  std::string file() const;
  // Writes format(reason) to file() (temporary + rename). False when no file
  // is set or it cannot be written; never throws.
  bool write_file(const std::string& reason) const noexcept;
  // A background thread writes the file every `period` when entries changed.
  void flush_every(std::chrono::milliseconds period);

  // Seconds this rank's threads spent blocked waiting for operations to
  // complete (Work::wait / synchronize), for the straggler check.
  void add_wait(double seconds);
  double waited_seconds() const;

 private:
  void flusher_loop(std::chrono::milliseconds period);

  int rank_, world_size_;
  mutable std::mutex mutex_;
  std::vector<FlightEntry> ring_;
  std::vector<FlightGroup> groups_;
  uint64_t next_id_ = 1;
  uint64_t version_ = 0;  // bumped by every change, for the flusher
  double waited_ = 0;
  std::string file_;

  std::mutex flush_mutex_;
  std::condition_variable flush_cv_;
  bool stop_ = false;
  std::thread flusher_;
};

// "<dir>/rank<N>.txt"
std::string flight_file(const std::string& dir, int rank);
// Wall clock, microseconds since the epoch.
int64_t flight_now_us();

}  // namespace stratum::distributed
