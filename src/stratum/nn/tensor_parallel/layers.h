#pragma once
// Megatron's sharded layers on Stratum's own linear (nn/linear.h), so the
// weight-gradient sinks (ZeRO's flat gradients) and the split backward of the
// zero-bubble schedule apply to each shard as to a whole weight.
//
//   column_parallel_linear  W split by output rows: input copied into the
//                           region (gathered along the sequence under sequence
//                           parallelism), output split along the last dimension.
//   row_parallel_linear     W split by input columns: input split along the last
//                           dimension, partial outputs summed (reduce-scattered
//                           along the sequence under sequence parallelism), then
//                           the bias, which every rank holds whole.
//   vocab_parallel_embedding / vocab_parallel_cross_entropy: the vocabulary
//                           split by rows, padded to a multiple of 64 x size.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "stratum/nn/tensor_parallel/mappings.h"
#include "stratum/nn/tensor_parallel/vocab_padding.h"

namespace stratum::nn::tp {

// x: [..., in] (replicated; [B, T / size, in] under sequence parallelism),
// weight: [out / size, in], bias: [out / size] or undefined -> [..., out / size].
at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                  const TensorParallel& tp);
// x: [..., in / size], weight: [out, in / size], bias: [out] or undefined ->
// [..., out] (replicated; [B, T / size, out] under sequence parallelism).
// Without a group of two or more: nn::linear itself, both of them.
at::Tensor row_parallel_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                               const TensorParallel& tp);

// The rows of a vocabulary this rank holds: the vocabulary is padded to
// padded_vocab_size(vocab, size) rows (aligned GEMM shapes on every shard),
// rank r holds [start, start + rows), of which the first `valid` are real
// tokens and the rest padding (never looked up; masked out of the loss).
struct VocabShard {
  int64_t vocab = 0;   // the real vocabulary
  int64_t start = 0;   // first global row
  int64_t rows = 0;    // rows held (padded_vocab_size / size)
  int64_t valid = 0;   // rows below `vocab`
};
VocabShard vocab_shard(int64_t vocab, int64_t size, int64_t rank);

// ids [B, T] -> [B, T, H] (replicated; [B, T / size, H] under sequence
// parallelism): each rank looks up the ids it holds through
// nn::embedding_lookup, zeros the others, and the group sums.
at::Tensor vocab_parallel_embedding(const at::Tensor& ids, const at::Tensor& weight, const VocabShard& shard,
                                    const TensorParallel& tp);

// Mean cross-entropy of logits split along the vocabulary ([..., shard.rows],
// this rank's columns) against targets [...], never gathering the
// full-vocabulary logits: each row's max, target logit and sum of
// exponentials are reduced across the group (one all-reduce of the maxima,
// one of the two sums), from one pass over the logits. fp32 a block of rows at a time, as
// nn::chunked_cross_entropy; the backward writes each rank's
// (softmax - onehot) * scale in the logits' dtype, zero in the padded columns.
// Returns the same 0-dim fp32 loss on every rank of the group.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, const VocabShard& shard,
                                        const TensorParallel& tp, int64_t ignore_index = -100,
                                        int64_t block_rows = 4096);

}  // namespace stratum::nn::tp
