#pragma once
// NCCL backend for CUDA tensors (CUDA builds only: STRATUM_WITH_NCCL).
//
// Each communicator owns a high-priority CUDA stream. An operation waits for
// the caller's current stream (so it sees the data the caller produced), runs
// on the communicator's stream, and records its tensors there with the caching
// allocator so their memory is not reused until NCCL is done. Work::wait()
// makes the caller's current stream wait (no host sync); synchronize() blocks
// the host. A watchdog thread ends the job, naming the operation and group,
// when an operation stays unfinished past the timeout.
#include <memory>

#include "stratum/distributed/communicator.h"

namespace stratum::distributed {

int cuda_device_count();

// Exposed communication, for benchmarks: while on, every stream-ordered
// Work::wait() brackets itself with two CUDA events on the caller's stream, so
// their elapsed time is how long computation stood still for communication
// (zero when the collective had already finished). Off by default: no cost.
void set_exposed_comm_timing(bool on);
// Sums the bracketed waits recorded since the last call (synchronizing on
// them) and forgets them.
double take_exposed_comm_seconds();

class NcclCommunicator : public Communicator {
 public:
  // Collective over `bootstrap` (the MPI world): rank 0 creates NCCL's unique
  // id and broadcasts it; every rank joins on `device`.
  static std::shared_ptr<NcclCommunicator> world(Communicator& bootstrap, int device, const CommOptions& options);
  ~NcclCommunicator() override;

  const char* backend() const override { return "nccl"; }
  int device() const;

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  WorkPtr all_gather(at::Tensor& output, const at::Tensor& input) override;
  WorkPtr broadcast(at::Tensor& tensor, int root) override;
  WorkPtr batch_p2p(const std::vector<P2POp>& ops) override;
  WorkPtr barrier() override;
  std::shared_ptr<Communicator> split(const std::vector<std::vector<int64_t>>& groups,
                                      const std::string& name) override;

  struct State;  // NCCL handle, stream, watchdog (nccl_communicator.cpp)

 private:
  NcclCommunicator(std::shared_ptr<State> state, int rank, std::vector<int64_t> global_ranks, std::string name,
                   CommOptions options);
  std::shared_ptr<void> session_;  // declared first: MPI outlives the NCCL communicator (mpi_session.h)
  std::shared_ptr<State> state_;
  uint64_t seq_ = 0;
};

}  // namespace stratum::distributed
