#pragma once
// The hang report: reads the ranks' flight-recorder files (flight_recorder.h)
// from one directory and says, for each operation some ranks wait in, which
// members of its group never arrived (named: op, group, its number on the
// group) and what those ranks did last. Printed by a rank whose collective
// timed out (init.cpp's abort path) and by the rank shim that kills a rank
// without heartbeat (rank_shim_run.cpp). Torch-free.
//
// Only the files of one host are read: on several hosts each reporter sees
// its own host's ranks, and the others' are reported as "no file" (their own
// hosts' shims report what they see).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stratum::distributed {

struct FlightOp {
  uint64_t id = 0, seq = 0;
  int group = -1;
  std::string op;
  int64_t bytes = 0, peer = -1;
  uint64_t sent = 0, received = 0;  // sends to / receives from `peer` so far, this op's included (0: none that way)
  double start = 0;                 // wall-clock seconds
  std::optional<double> wait;       // when a thread began to block on it
  std::optional<double> end;        // none: still open
};

struct FlightGroupState {
  std::string name, backend;
  std::vector<int64_t> ranks;
  uint64_t issued = 0, completed = 0;
  struct P2P {
    int64_t peer = -1;  // world rank
    uint64_t sent = 0, received = 0;
  };
  std::vector<P2P> p2p;  // totals by partner
};

// One rank's file.
struct RankFlight {
  int rank = -1, world_size = 0;
  int64_t pid = 0;
  std::string host, reason, path;
  double written = 0;
  std::vector<FlightGroupState> groups;
  std::vector<FlightOp> ops;  // oldest first
};

// Parses one file's text; throws stratum::Error naming `path`, the line and what is wrong.
RankFlight parse_flight_file(const std::string& text, const std::string& path);

struct FlightDir {
  std::string dir;
  int world_size = 0;               // from the files (0 when none)
  std::vector<RankFlight> ranks;    // by rank
  std::vector<std::string> problems;  // files that could not be read, named
};
// Every rank<N>.txt of `dir` (temporaries and other names ignored).
FlightDir read_flight_dir(const std::string& dir);

// An operation some ranks wait in, and the members of its group that are not in it.
struct Stall {
  std::string group;              // name
  std::string backend;            // "mpi", "nccl"
  std::vector<int64_t> members;   // world ranks
  std::string op;
  uint64_t seq = 0;
  std::vector<int> waiting;       // ranks with it open
  double waiting_since = 0;       // the earliest start among them
  struct Behind {
    int rank;
    uint64_t issued;              // its highest number on the group (0: none recorded)
    std::string detail;           // what its file shows it short of
  };
  std::vector<Behind> behind;     // members whose file shows a lower number
  std::vector<int> no_file;       // members with no file (stopped before writing one, dead, another host)
  int64_t peer = -1;              // point-to-point: the partner the waiting rank needs
};
// The stalls in `ranks`' files: per group, the lowest open collective number
// that some member has not reached; for a send/recv a rank blocks in, its
// partner when the partner's file shows fewer matching sends (receives) to
// (from) that rank than the op waits for.
std::vector<Stall> find_stalls(const std::vector<RankFlight>& ranks, int world_size);

// The report, e.g.
//   flight recorder (/tmp/run/flight, files of 2 of 2 ranks):
//   all_reduce #12 on group 'world' [ranks 0, 1]: rank 0 waits in it (for 9.8 s); not arrived: rank 1 (at #11)
//   group 'world': rank 0 at #12, rank 1 at #11
//   rank 1 (host node3, pid 4242; /tmp/run/flight/rank1.txt written 10.0 s ago, periodic): its last 5 operations:
//     all_reduce #11 on 'world' 4.0 KiB: done in 0.3 ms, 10.1 s ago
// `suspects`: ranks to describe even when no stall names them (the shim's hung
// rank). `now`: wall-clock seconds. `last`: entries shown per named rank.
std::string hang_report(const FlightDir& dir, const std::vector<int>& suspects, double now, size_t last = 5);

// "rank 1 (host h, pid 4242; <path> written 3.1 s ago, periodic): its last 5
// operations:" and one indented line each.
std::string last_operations(const RankFlight& rank, double now, size_t last = 5);

// Seconds since the epoch, wall clock.
double flight_now_seconds();

}  // namespace stratum::distributed
