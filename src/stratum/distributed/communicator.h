#pragma once
// The one interface every parallel algorithm talks to. Two real backends:
// MPI (mpi_communicator.h) for CPU tensors, and for CUDA tensors of ranks that
// share a GPU (staged through host memory), and NCCL for CUDA tensors
// (nccl_communicator.h); the comms logger decorates either.
//
// Every operation is asynchronous and returns a Work handle. wait() completes
// it: with MPI the call returns once the data is in place; with NCCL it makes
// the caller's current CUDA stream wait (stream-ordered, no host sync).
// A Work that does not complete within the communicator's timeout reports the
// operation, its sequence number and the group's ranks, then ends the job
// (CommOptions::abort_on_timeout) or throws CommTimeout.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/core/error.h"

namespace stratum::distributed {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

// The operations, as named in logs, comms-logger tables and desync reports.
enum class CommOp { all_reduce, reduce_scatter, all_gather, broadcast, send, recv, batch_p2p, barrier };
const char* comm_op_name(CommOp op);

class CommTimeout : public Error {
 public:
  explicit CommTimeout(const std::string& what) : Error(what) {}
};

struct CommOptions {
  // STRATUM_COMM_TIMEOUT (seconds) overrides the default.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // true: print the report and end the whole job (MPI_Abort); false: throw CommTimeout.
  bool abort_on_timeout = true;
  static CommOptions from_env();
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Blocks the host until the operation has finished on its device (for NCCL
  // wait() only orders streams). For timing (comms logger) and shutdown.
  virtual void synchronize() { wait(); }
  // Non-blocking: has it finished (for NCCL: on the device)?
  virtual bool completed() = 0;
  // As wait(), for a side stream whose waiting holds nothing up: not counted
  // as exposed communication (set_exposed_comm_timing) nor, in the comms
  // logger, as the operation's latency (its own wait() still records that).
  virtual void wait_in_background() { wait(); }
};
using WorkPtr = std::shared_ptr<Work>;

struct P2POp {
  enum class Kind { send, recv };
  Kind kind;
  at::Tensor tensor;
  int peer;  // rank in this communicator
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  // The world ranks of this group's members, by group rank (for messages).
  const std::vector<int64_t>& global_ranks() const { return global_ranks_; }
  const std::string& name() const { return name_; }  // "world", "dp", "tp", ...
  const CommOptions& options() const { return options_; }
  virtual const char* backend() const = 0;  // "mpi" or "nccl"

  // In place. avg divides by size() (floating types only).
  virtual WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  // Flat tensors: input.numel() == output.numel() * size(); rank r gets chunk r.
  virtual WorkPtr reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) = 0;
  // Flat tensors: output.numel() == input.numel() * size(); chunk r comes from rank r.
  // In place when `input` is this rank's chunk of `output`.
  virtual WorkPtr all_gather(at::Tensor& output, const at::Tensor& input) = 0;
  virtual WorkPtr broadcast(at::Tensor& tensor, int root) = 0;
  // A batch_p2p of one operation, unless a decorator wants to see it apart.
  virtual WorkPtr send(const at::Tensor& tensor, int peer);
  virtual WorkPtr recv(at::Tensor& tensor, int peer);
  // All sends and receives as one operation (pipeline stages exchange both ways).
  virtual WorkPtr batch_p2p(const std::vector<P2POp>& ops) = 0;
  virtual WorkPtr barrier() = 0;

  // Collective over this communicator: every member passes the same `groups`
  // (a partition of 0..size()-1, e.g. Topology::groups(Axis::dp)) and gets the
  // communicator of the group that holds it.
  virtual std::shared_ptr<Communicator> split(const std::vector<std::vector<int64_t>>& groups,
                                              const std::string& name) = 0;

 protected:
  Communicator(int rank, std::vector<int64_t> global_ranks, std::string name, CommOptions options)
      : rank_(rank), global_ranks_(std::move(global_ranks)), name_(std::move(name)), options_(options) {}
  // "all_reduce #12 (4.0 MiB bf16) on group 'dp' [ranks 0, 2]": the words of every error.
  std::string describe(CommOp op, uint64_t seq, int64_t bytes, const std::string& dtype) const;

  int rank_;
  std::vector<int64_t> global_ranks_;
  std::string name_;
  CommOptions options_;
};

// Throws stratum::Error naming the operation and the sizes when a call's
// tensors do not fit it (shared by the backends).
void check_collective_args(CommOp op, const Communicator& comm, const at::Tensor& a, const at::Tensor* b);

// A batch of point-to-point operations as the backends see it, after the
// checks every backend runs first.
struct P2PBatch {
  CommOp kind;                      // send or recv for one operation, else batch_p2p
  int64_t bytes = 0;                // all tensors together
  std::vector<at::Tensor> tensors;  // kept alive until the operation completes
};
// The name a batch is logged and reported under: one operation is a plain send or recv.
CommOp p2p_kind(const std::vector<P2POp>& ops);
// Checks every operation identically on every rank (defined, contiguous, on the
// backend's device by `check_device`, the peer another rank of this group), so a
// bad call is an error everywhere rather than a hang.
P2PBatch check_p2p_args(const Communicator& comm, const std::vector<P2POp>& ops,
                        const std::function<void(CommOp, const at::Tensor&)>& check_device);

std::string format_bytes(int64_t bytes);

// For split(): checks that `groups` partition 0..comm.size()-1 (identically on
// every rank, so a bad partition is an error everywhere rather than a hang) and
// returns this rank's (color, key) = (its group's index, its place in it).
std::pair<int, int> split_color_key(const Communicator& comm, const std::vector<std::vector<int64_t>>& groups,
                                    const std::string& new_name);

}  // namespace stratum::distributed
