#pragma once
// Expert parallelism's transfers: a layer's experts split over the ranks of
// an expert-parallel group, each rank's tokens sent to the ranks that hold
// their experts and the experts' outputs sent back (Megatron-Core's
// all-to-all token dispatcher). Variable sizes, as point-to-point batches
// (Communicator::batch_p2p: MPI, or NCCL's grouped send/recv); the one
// other file of nn/ besides tensor_parallel/ that sees a communicator.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"

namespace stratum::nn::moe {

struct ExpertParallel {
  std::shared_ptr<distributed::Communicator> group;  // null or of one rank: every expert here

  int64_t size() const { return group ? group->size() : 1; }
  int64_t rank() const { return group ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
};

// Rows of x [N, C], send_splits[p] of them for peer p in peer order, sent to
// their peers; returns the rows received, recv_splits[p] from peer p, in
// peer order. Its backward sends the rows' gradients back the same way.
at::Tensor exchange_rows(const at::Tensor& x, const std::vector<int64_t>& send_splits,
                         const std::vector<int64_t>& recv_splits, const ExpertParallel& ep);

// Every rank's count of assignments for each expert: counts int64 [E] on the
// group's device (an NCCL group's GPU; an MPI group takes either) in, [size, E]
// int64 on the CPU out (one all-gather and one synchronization: the
// transfers' sizes).
at::Tensor gather_counts(const at::Tensor& counts, const ExpertParallel& ep);
// The same over any group (null: this rank's alone), e.g. the ranks a
// micro-batch's sequences are split over.
at::Tensor gather_counts(const at::Tensor& counts, const std::shared_ptr<distributed::Communicator>& group);

}  // namespace stratum::nn::moe
