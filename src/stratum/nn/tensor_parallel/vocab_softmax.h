#pragma once
// The pieces of a softmax cross-entropy over a vocabulary split by rows
// across a tensor-parallel group, shared by the loss over given logit
// shards (layers.h) and the tiled one that makes them a tile at a time
// (tiled_vocab_loss.h): per-row statistics of a block of fp32 logits, the
// group's log-sum-exp from them, and a block's logit gradient.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"

namespace stratum::nn::tp {

// Each row's statistics over the rows seen so far: `row_max` [N] (the local
// maximum), `sums` [2, N] (sum of exp(x - local max), the target's logit).
struct VocabRowStats {
  at::Tensor row_max, sums;
  // For n rows on `options`' device: max at the lowest float, sums 0 (a shard of padding only keeps them).
  static VocabRowStats empty(int64_t n, const at::TensorOptions& options);
  // Rows [r, r + x.size(0)) from their fp32 logits x [len, valid] and local target columns `column` [len] (-1: none).
  void add(int64_t r, const at::Tensor& x, const at::Tensor& column);
  // Collective over `group`: each row's log-sum-exp over the whole vocabulary;
  // afterwards sums[1] holds each row's target logit (from whichever rank has it).
  at::Tensor group_log_sum_exp(distributed::Communicator& group);
};

// Each row's local target column: `targets` minus `start` where the global id
// is one of this rank's `valid` rows and not `ignore_index`, else -1.
at::Tensor local_target_columns(const at::Tensor& targets, int64_t start, int64_t valid, int64_t ignore_index);

// The gradient of rows' mean loss at their fp32 logits x [len, valid]:
// (softmax(x) - onehot(column)) * row_scale, from each row's log-sum-exp.
// Written over x.
at::Tensor logit_gradient_(at::Tensor x, const at::Tensor& lse, const at::Tensor& column, const at::Tensor& row_scale);

}  // namespace stratum::nn::tp
