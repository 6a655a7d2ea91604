#include "stratum/nn/cross_entropy.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"
#include "stratum/nn/linear.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ChunkedCrossEntropy : torch::autograd::Function<ChunkedCrossEntropy> {
  // logits: [N, V]; targets: [N] int64.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index, int64_t block_rows) {
    const int64_t n = logits.size(0);
    at::Tensor lse = at::empty({n}, logits.options().dtype(at::kFloat));
    at::Tensor picked = at::empty({n}, logits.options().dtype(at::kFloat));
    const at::Tensor valid = targets.ne(ignore_index);
    const at::Tensor safe_targets = targets.masked_fill(valid.logical_not(), 0);
    for (int64_t r = 0; r < n; r += block_rows) {
      const int64_t len = std::min(block_rows, n - r);
      const at::Tensor block = logits.narrow(0, r, len).to(at::kFloat);
      lse.narrow(0, r, len).copy_(at::logsumexp(block, {1}));
      picked.narrow(0, r, len).copy_(block.gather(1, safe_targets.narrow(0, r, len).unsqueeze(1)).squeeze(1));
    }
    const at::Tensor count = valid.sum().to(at::kFloat);
    ctx->save_for_backward({logits, safe_targets, valid, lse, count});
    ctx->saved_data["block_rows"] = block_rows;
    return ((lse - picked) * valid).sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &valid = saved[2], &lse = saved[3], &count = saved[4];
    const int64_t block_rows = ctx->saved_data["block_rows"].toInt();
    const int64_t n = logits.size(0);
    // d loss / d logit = (softmax - onehot) * g / count on valid rows, 0 elsewhere.
    const at::Tensor scale = (grads[0].to(at::kFloat) / count);
    // Rows 64-element aligned, as the LM head's backward multiplies fastest with.
    at::Tensor grad = empty_aligned_rows(n, logits.size(1), logits.options());
    for (int64_t r = 0; r < n; r += block_rows) {
      const int64_t len = std::min(block_rows, n - r);
      at::Tensor g = logits.narrow(0, r, len).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      g.sub_(lse.narrow(0, r, len).unsqueeze(1)).exp_();
      g.scatter_add_(1, targets.narrow(0, r, len).unsqueeze(1), at::full({len, 1}, -1.0f, g.options()));
      g.mul_((valid.narrow(0, r, len).to(at::kFloat) * scale).unsqueeze(1));
      grad.narrow(0, r, len).copy_(g);
    }
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                 int64_t block_rows) {
  if (!logits.defined() || !at::isFloatingType(logits.scalar_type()) || logits.dim() < 1)
    throw Error("chunked_cross_entropy: logits must be a floating tensor [..., V]");
  if (logits.sizes().slice(0, logits.dim() - 1) != targets.sizes())
    throw Error("chunked_cross_entropy: targets " + c10::str(targets.sizes()) + " do not match logits " +
                c10::str(logits.sizes()));
  if (block_rows < 1) throw Error("chunked_cross_entropy: block_rows must be >= 1");
  const at::Tensor flat = logits.reshape({-1, logits.size(-1)});
  return ChunkedCrossEntropy::apply(flat, targets.reshape({-1}).to(at::kLong), ignore_index, block_rows);
}

}  // namespace stratum::nn
