#include "stratum/nn/tensor_parallel/layers.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <string>

#include "stratum/core/error.h"
#include "stratum/nn/embedding.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/tensor_parallel/vocab_softmax.h"

namespace stratum::nn::tp {

at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                  const TensorParallel& tp) {
  return through_region(x, tp, [&](const at::Tensor& in) { return nn::linear(in, weight, bias); });
}

at::Tensor row_parallel_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                               const TensorParallel& tp) {
  if (!tp.enabled()) return nn::linear(x, weight, bias);  // the bias in the GEMM
  const at::Tensor y = leave_region(nn::linear(x, weight), tp);
  return bias.defined() ? y + bias : y;
}

VocabShard vocab_shard(int64_t vocab, int64_t size, int64_t rank) {
  VocabShard s;
  s.vocab = vocab;
  s.rows = vocab_rows_per_rank(vocab, size);
  s.start = rank * s.rows;
  s.valid = std::clamp<int64_t>(vocab - s.start, 0, s.rows);
  return s;
}

at::Tensor vocab_parallel_embedding(const at::Tensor& ids, const at::Tensor& weight, const VocabShard& shard,
                                    const TensorParallel& tp) {
  if (!tp.enabled()) return nn::embedding_lookup(weight, ids);
  if (weight.size(0) != shard.rows)
    throw Error("vocab_parallel_embedding: the weight has " + std::to_string(weight.size(0)) +
                " rows but this rank's vocabulary shard has " + std::to_string(shard.rows));
  const at::Tensor held = ids.ge(shard.start).logical_and(ids.lt(shard.start + shard.valid));
  const at::Tensor local = (ids - shard.start).masked_fill(held.logical_not(), 0);
  const at::Tensor rows = nn::embedding_lookup(weight, local) * held.unsqueeze(-1).to(weight.scalar_type());
  return leave_region(rows, tp);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows [r, r + len) of the local logits' real columns (the first `valid`) in fp32.
at::Tensor block_fp32(const at::Tensor& logits, int64_t r, int64_t len, int64_t valid) {
  return logits.narrow(0, r, len).narrow(1, 0, valid).to(at::kFloat);
}

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  // logits [N, Vl], targets [N] int64. One pass over the logits: each row's
  // local max and sum of exp(x - local max), rescaled to the group's max
  // once that is known. Saves the logits, each row's log-sum-exp and its
  // local target column (-1: another rank's or ignored).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t group_address, int64_t start, int64_t valid, int64_t ignore_index,
                            int64_t block_rows) {
    auto& group = *reinterpret_cast<distributed::Communicator*>(static_cast<intptr_t>(group_address));
    const int64_t n = logits.size(0);
    const at::Tensor live = targets.ne(ignore_index);
    const at::Tensor column = local_target_columns(targets, start, valid, ignore_index);
    VocabRowStats stats = VocabRowStats::empty(n, logits.options());
    for (int64_t r = 0; valid > 0 && r < n; r += block_rows) {
      const int64_t len = std::min(block_rows, n - r);
      stats.add(r, block_fp32(logits, r, len, valid), column.narrow(0, r, len));
    }
    const at::Tensor lse = stats.group_log_sum_exp(group);
    const at::Tensor count = live.sum().to(at::kFloat);
    ctx->save_for_backward({logits, column, live, lse, count});
    ctx->saved_data["valid"] = valid;
    ctx->saved_data["block_rows"] = block_rows;
    return ((lse - stats.sums[1]) * live).sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &column = saved[1], &live = saved[2], &lse = saved[3], &count = saved[4];
    const int64_t valid = ctx->saved_data["valid"].toInt(), block_rows = ctx->saved_data["block_rows"].toInt();
    const int64_t n = logits.size(0);
    const at::Tensor row_scale = live.to(at::kFloat) * (grads[0].to(at::kFloat) / count);
    at::Tensor grad = at::empty(logits.sizes(), logits.options());
    if (valid < logits.size(1)) grad.narrow(1, valid, logits.size(1) - valid).zero_();  // padding
    for (int64_t r = 0; valid > 0 && r < n; r += block_rows) {
      const int64_t len = std::min(block_rows, n - r);
      // A copy in fp32 (block_fp32 of fp32 logits is a view: never written over).
      at::Tensor x = block_fp32(logits, r, len, valid).clone();
      logit_gradient_(x, lse.narrow(0, r, len), column.narrow(0, r, len), row_scale.narrow(0, r, len));
      grad.narrow(0, r, len).narrow(1, 0, valid).copy_(x);  // rounded to the logits' dtype on store
    }
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, const VocabShard& shard,
                                        const TensorParallel& tp, int64_t ignore_index, int64_t block_rows) {
  if (!logits.defined() || !at::isFloatingType(logits.scalar_type()) || logits.dim() < 1)
    throw Error("vocab_parallel_cross_entropy: logits must be a floating tensor [..., V / size]");
  if (logits.sizes().slice(0, logits.dim() - 1) != targets.sizes())
    throw Error("vocab_parallel_cross_entropy: targets " + c10::str(targets.sizes()) + " do not match logits " +
                c10::str(logits.sizes()));
  if (logits.size(-1) != shard.rows)
    throw Error("vocab_parallel_cross_entropy: logits have " + std::to_string(logits.size(-1)) +
                " columns but this rank's vocabulary shard has " + std::to_string(shard.rows));
  if (block_rows < 1) throw Error("vocab_parallel_cross_entropy: block_rows must be >= 1");
  if (!tp.group) throw Error("vocab_parallel_cross_entropy: no tensor-parallel group");
  return VocabParallelCrossEntropy::apply(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}).to(at::kLong),
                                          static_cast<int64_t>(reinterpret_cast<intptr_t>(tp.group.get())),
                                          shard.start, shard.valid, ignore_index, block_rows);
}

}  // namespace stratum::nn::tp
