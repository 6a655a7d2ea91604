#pragma once
// MPI backend (OpenMPI). Non-blocking MPI calls behind Work handles; 16-bit
// reductions are staged through fp32 so that sums of bf16/fp16 are rounded
// once, not at every hop. CUDA tensors (CUDA builds; ranks sharing a GPU, where
// NCCL cannot run) travel through pinned host buffers: copied out on the
// tensor's current stream, which is synchronized, when the operation is issued,
// and results copied back (the copy synchronized too) when it completes, so
// wait() returns with the data in the tensor on every stream.
#include <mpi.h>

#include "stratum/distributed/communicator.h"

namespace stratum::distributed {

class HostStaging;

class MpiCommunicator : public Communicator {
 public:
  // MPI_COMM_WORLD; MPI must be initialized (distributed::init).
  static std::shared_ptr<MpiCommunicator> world(const CommOptions& options);
  ~MpiCommunicator() override;

  const char* backend() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  WorkPtr all_gather(at::Tensor& output, const at::Tensor& input) override;
  WorkPtr broadcast(at::Tensor& tensor, int root) override;
  WorkPtr batch_p2p(const std::vector<P2POp>& ops) override;
  WorkPtr barrier() override;
  std::shared_ptr<Communicator> split(const std::vector<std::vector<int64_t>>& groups,
                                      const std::string& name) override;

 private:
  MpiCommunicator(MPI_Comm comm, bool owned, std::vector<int64_t> global_ranks, std::string name,
                  CommOptions options);
  void check_device(CommOp op, const at::Tensor& t) const;

  std::shared_ptr<void> session_;  // MPI stays up while this communicator lives (mpi_session.h)
  std::shared_ptr<HostStaging> staging_;  // pinned buffers for CUDA tensors, reused (null in CPU builds)
  MPI_Comm comm_;
  bool owned_;  // MPI_Comm_free on destruction (not for MPI_COMM_WORLD)
  uint64_t seq_ = 0;
};

}  // namespace stratum::distributed
