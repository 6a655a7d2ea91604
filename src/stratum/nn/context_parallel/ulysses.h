#pragma once
// DeepSpeed-Ulysses' exchange (Jacobs et al. 2023): the ranks of a Ulysses
// group each hold a part of the sequence with every head, and trade it by
// all-to-all for the whole of their parts with a 1/size share of the heads,
// so that attention runs over whole heads locally; the output is traded
// back. Each is the other's gradient. Point-to-point batches
// (Communicator::batch_p2p: MPI, or NCCL's grouped send/recv), one for q, k
// and v together.
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"

namespace stratum::nn::cp {

// Each x [B, H, T, D] (H a multiple of the group's size) -> [B, H / size,
// size * T, D]: heads [r * H / size, (r + 1) * H / size) of every rank's
// sequence, in rank order, on rank r. Differentiable.
std::vector<at::Tensor> sequence_to_heads(const std::vector<at::Tensor>& xs,
                                          const std::shared_ptr<distributed::Communicator>& group);

// The inverse: y [B, H / size, size * T, D] -> [B, H, T, D]. Differentiable.
at::Tensor heads_to_sequence(const at::Tensor& y, const std::shared_ptr<distributed::Communicator>& group);

}  // namespace stratum::nn::cp
