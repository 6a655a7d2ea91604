#pragma once
// Tensor parallelism's communication as paired autograd functions (Megatron's
// mappings): each forward's collective is matched by its transpose in the
// backward, so a sharded layer is ordinary autograd code between them.
//
//   copy_to_region              identity           | all-reduce
//   reduce_from_region          all-reduce         | identity
//   scatter_to_last             keep own chunk     | all-gather      (last dimension)
//   gather_from_last            all-gather         | keep own chunk  (last dimension)
//   scatter_to_sequence         keep own chunk     | all-gather      (sequence: dimension 1 of [B, T, C])
//   gather_from_sequence        all-gather         | reduce-scatter  (sequence)
//   reduce_scatter_to_sequence  reduce-scatter     | all-gather      (sequence)
//
// Chunk r of a split dimension belongs to group rank r. These and the layers
// beside them are the only nn/ files that see a communicator. The group must
// outlive every autograd graph built through it (the model holds it).
#include <cstdint>
#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"

namespace stratum::nn::tp {

// The tensor-parallel group a sharded layer runs over. No group, or a group of
// one: every function here is the identity and no collective runs.
struct TensorParallel {
  std::shared_ptr<distributed::Communicator> group;
  // Korthikanti et al.'s sequence parallelism: outside the split regions
  // activations are [B, T / size, C] slices of the sequence.
  bool sequence_parallel = false;

  int64_t size() const { return group ? group->size() : 1; }
  int64_t rank() const { return group ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
};

// The sequence dimension of [B, T, C] activations.
inline constexpr int64_t kSequenceDim = 1;

at::Tensor copy_to_region(const at::Tensor& x, const TensorParallel& tp);
at::Tensor reduce_from_region(const at::Tensor& x, const TensorParallel& tp);
at::Tensor scatter_to_last(const at::Tensor& x, const TensorParallel& tp);
at::Tensor gather_from_last(const at::Tensor& x, const TensorParallel& tp);
at::Tensor scatter_to_sequence(const at::Tensor& x, const TensorParallel& tp);
at::Tensor gather_from_sequence(const at::Tensor& x, const TensorParallel& tp);
at::Tensor reduce_scatter_to_sequence(const at::Tensor& x, const TensorParallel& tp);

// Into a split region: copy_to_region, or gather_from_sequence under
// sequence parallelism. Out of it: reduce_from_region, or
// reduce_scatter_to_sequence. What every sharded layer opens and closes with.
at::Tensor enter_region(const at::Tensor& x, const TensorParallel& tp);
at::Tensor leave_region(const at::Tensor& partial, const TensorParallel& tp);

// fn(enter_region(x)) for the region's first operation (its column-parallel
// GEMMs). Under sequence parallelism the gathered input fn keeps for its
// backward is not kept between the passes (Korthikanti et al.): its storage
// is released once fn returns and gathered again from this rank's slice when
// fn's output gets its gradient, before fn's backward reads it. fn must keep
// the gathered input itself (not a view of it) for the memory to go.
at::Tensor through_region(const at::Tensor& x, const TensorParallel& tp,
                          const std::function<at::Tensor(const at::Tensor&)>& fn);

// The collectives themselves, without autograd (for the functions above and
// for tests): all-gather of `x` along `dim` (chunk r from rank r), the
// reduce-scatter (sum) along `dim`, and rank r's chunk along `dim`. A `dim`
// the group does not divide is an error naming both numbers and `what`.
at::Tensor all_gather_along(const at::Tensor& x, int64_t dim, distributed::Communicator& group);
at::Tensor reduce_scatter_along(const at::Tensor& x, int64_t dim, distributed::Communicator& group,
                                const char* what = "tensor");
at::Tensor chunk_along(const at::Tensor& x, int64_t dim, int64_t rank, int64_t parts, const char* what = "tensor");

}  // namespace stratum::nn::tp
