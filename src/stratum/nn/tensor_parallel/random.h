#pragma once
// Dropout under tensor parallelism (Megatron's model-parallel RNG, without a
// tracker to carry around):
//   - inside a split region (attention over this rank's heads) each rank
//     draws from a stream of its own: with_rank_stream seeds the default
//     generators from one draw of the CPU generator mixed with the rank, runs
//     the region, and puts the generators back. Every rank of the group makes
//     the same draw, so their default generators stay equal, and activation
//     checkpointing, which replays the default generators, replays the region;
//   - outside them (residual and embedding dropout) every rank draws the mask
//     the whole model draws, from the default generators the group holds
//     alike; under sequence parallelism the whole sequence's mask, of which the
//     rank keeps its slice. Such dropout is the single process's exactly.
#include <functional>

#include <ATen/core/Tensor.h>

#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn::tp {

// fn() with `device`'s default generators (the CPU's, and the CUDA device's)
// on this rank's stream; fn() itself when the group is of one.
at::Tensor with_rank_stream(const TensorParallel& tp, c10::Device device, const std::function<at::Tensor()>& fn);

// at::dropout(x, p) on an activation between split regions: [B, T, C], or
// under sequence parallelism this rank's [B, T / size, C] slice.
at::Tensor dropout_outside_region(const at::Tensor& x, double p, const TensorParallel& tp);

}  // namespace stratum::nn::tp
