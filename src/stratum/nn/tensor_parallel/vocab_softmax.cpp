#include "stratum/nn/tensor_parallel/vocab_softmax.h"

#include <limits>

#include <ATen/ATen.h>

namespace stratum::nn::tp {

VocabRowStats VocabRowStats::empty(int64_t n, const at::TensorOptions& options) {
  const auto f32 = options.dtype(at::kFloat);
  return {at::full({n}, std::numeric_limits<float>::lowest(), f32), at::zeros({2, n}, f32)};
}

void VocabRowStats::add(int64_t r, const at::Tensor& x, const at::Tensor& column) {
  const int64_t len = x.size(0);
  const at::Tensor m = std::get<0>(x.max(1));
  row_max.narrow(0, r, len).copy_(m);
  sums[0].narrow(0, r, len).copy_((x - m.unsqueeze(1)).exp().sum(1));
  const at::Tensor picked = x.gather(1, column.clamp_min(0).unsqueeze(1)).squeeze(1);
  sums[1].narrow(0, r, len).copy_(picked.masked_fill(column.lt(0), 0.0f));
}

at::Tensor VocabRowStats::group_log_sum_exp(distributed::Communicator& group) {
  at::Tensor group_max = row_max.clone();
  group.all_reduce(group_max, distributed::ReduceOp::max)->wait();
  sums[0].mul_((row_max - group_max).exp());
  group.all_reduce(sums, distributed::ReduceOp::sum)->wait();
  return sums[0].log() + group_max;
}

at::Tensor local_target_columns(const at::Tensor& targets, int64_t start, int64_t valid, int64_t ignore_index) {
  const at::Tensor local = targets - start;
  const at::Tensor mine = targets.ne(ignore_index).logical_and(local.ge(0)).logical_and(local.lt(valid));
  return local.masked_fill(mine.logical_not(), -1);
}

at::Tensor logit_gradient_(at::Tensor x, const at::Tensor& lse, const at::Tensor& column, const at::Tensor& row_scale) {
  x.sub_(lse.unsqueeze(1)).exp_();  // softmax from the kept log-sum-exp
  x.scatter_add_(1, column.clamp_min(0).unsqueeze(1), -column.ge(0).to(at::kFloat).unsqueeze(1));
  return x.mul_(row_scale.unsqueeze(1));
}

}  // namespace stratum::nn::tp
