#include "stratum/nn/cross_entropy.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/cross_entropy_cuda.h"
#include "stratum/nn/kernel_launch.h"
#endif

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The gradient of [N, V] logits, laid out as they are: rows strided like the
// LM head's padded view (nn::linear_padded_rows), whose backward then reads it
// in place instead of copying it into aligned rows. The pad is never read;
// rows further apart than a pad (any other view) get a dense gradient.
at::Tensor empty_gradient_like(const at::Tensor& logits, bool consume) {
  if (consume) return logits.detach();  // the same storage and strides
  const int64_t pad = logits.stride(0) - logits.size(1);
  if (logits.stride(1) != 1 || pad <= 0 || pad >= 64) return at::empty(logits.sizes(), logits.options());
  return at::empty({logits.size(0), logits.stride(0)}, logits.options()).narrow(1, 0, logits.size(1));
}

#ifdef STRATUM_WITH_CUDA_KERNELS
cuda::CrossEntropyRows kernel_rows(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                   at::Tensor& lse) {
  cuda::CrossEntropyRows a;
  a.rows = logits.size(0);
  a.vocab = logits.size(1);
  a.row_stride = logits.stride(0);
  a.logits = logits.const_data_ptr();
  a.dtype = cuda::dtype_of(logits);
  a.targets = targets.const_data_ptr<int64_t>();
  a.ignore_index = ignore_index;
  a.lse = lse.data_ptr<float>();
  return a;
}

// One kernel per direction on a GPU (nn/cross_entropy_cuda.h): logits [N, V]
// with unit stride along V (rows may be strided: the LM head's padded view).
struct FusedCrossEntropy : torch::autograd::Function<FusedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index, bool consume) {
    c10::cuda::CUDAGuard guard(logits.device());
    ctx->saved_data["consume"] = consume;
    const auto f32 = logits.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({logits.size(0)}, f32), logp = at::empty({logits.size(0)}, f32);
    const at::Tensor t = targets.contiguous();
    cuda::check_launch(cuda::launch_cross_entropy_forward(kernel_rows(logits, t, ignore_index, lse),
                                                          logp.data_ptr<float>(), cuda::current_stream()),
                       "chunked_cross_entropy: forward kernel");
    const at::Tensor count = t.ne(ignore_index).sum().to(at::kFloat);
    ctx->save_for_backward({logits, t, lse, count});
    ctx->saved_data["ignore_index"] = ignore_index;
    return -logp.sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &count = saved[3];
    at::Tensor lse = saved[2];
    c10::cuda::CUDAGuard guard(logits.device());
    const at::Tensor scale = grads[0].to(at::kFloat) / count;
    // Each thread reads a logit before writing its gradient in the same place.
    at::Tensor grad = empty_gradient_like(logits, ctx->saved_data["consume"].toBool());
    cuda::check_launch(cuda::launch_cross_entropy_backward(
                           kernel_rows(logits, targets, ctx->saved_data["ignore_index"].toInt(), lse),
                           scale.const_data_ptr<float>(), grad.data_ptr(), grad.stride(0), cuda::current_stream()),
                       "chunked_cross_entropy: backward kernel");
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
#endif

struct ChunkedCrossEntropy : torch::autograd::Function<ChunkedCrossEntropy> {
  // logits: [N, V]; targets: [N] int64. Per block: one fused log-softmax
  // (forward) or softmax (backward) in fp32, then the target column.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index, int64_t block_rows, bool consume) {
    const int64_t n = logits.size(0);
    ctx->saved_data["consume"] = consume;
    at::Tensor picked = at::empty({n}, logits.options().dtype(at::kFloat));  // log p(target)
    const at::Tensor valid = targets.ne(ignore_index);
    const at::Tensor safe_targets = targets.masked_fill(valid.logical_not(), 0);
    for (int64_t r = 0; r < n; r += block_rows) {
      const int64_t len = std::min(block_rows, n - r);
      const at::Tensor logp = at::log_softmax(logits.narrow(0, r, len), 1, at::kFloat);
      picked.narrow(0, r, len).copy_(logp.gather(1, safe_targets.narrow(0, r, len).unsqueeze(1)).squeeze(1));
    }
    const at::Tensor count = valid.sum().to(at::kFloat);
    ctx->save_for_backward({logits, safe_targets, valid, count});
    ctx->saved_data["block_rows"] = block_rows;
    return -(picked * valid).sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &valid = saved[2], &count = saved[3];
    const int64_t block_rows = ctx->saved_data["block_rows"].toInt();
    const int64_t n = logits.size(0);
    // d loss / d logit = (softmax - onehot) * g / count on valid rows, 0 elsewhere.
    const at::Tensor row_scale = valid.to(at::kFloat) * (grads[0].to(at::kFloat) / count);
    // A block's softmax is taken in fp32 before its gradient is stored (over it, when consumed).
    at::Tensor grad = empty_gradient_like(logits, ctx->saved_data["consume"].toBool());
    for (int64_t r = 0; r < n; r += block_rows) {
      const int64_t len = std::min(block_rows, n - r);
      at::Tensor p = at::softmax(logits.narrow(0, r, len), 1, at::kFloat);
      p.scatter_add_(1, targets.narrow(0, r, len).unsqueeze(1), at::full({len, 1}, -1.0f, p.options()));
      at::Tensor out = grad.narrow(0, r, len);
      at::mul_out(out, p, row_scale.narrow(0, r, len).unsqueeze(1));  // rounded to the logits' dtype on store
    }
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                 int64_t block_rows, bool consume_logits) {
  if (!logits.defined() || !at::isFloatingType(logits.scalar_type()) || logits.dim() < 1)
    throw Error("chunked_cross_entropy: logits must be a floating tensor [..., V]");
  if (logits.sizes().slice(0, logits.dim() - 1) != targets.sizes())
    throw Error("chunked_cross_entropy: targets " + c10::str(targets.sizes()) + " do not match logits " +
                c10::str(logits.sizes()));
  if (block_rows < 1) throw Error("chunked_cross_entropy: block_rows must be >= 1");
  const at::Tensor flat = logits.reshape({-1, logits.size(-1)});
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (flat.is_cuda() && flat.stride(1) == 1 && cuda::kernel_dtype(flat.scalar_type()))
    return FusedCrossEntropy::apply(flat, targets.reshape({-1}).to(at::kLong), ignore_index, consume_logits);
#endif
  return ChunkedCrossEntropy::apply(flat, targets.reshape({-1}).to(at::kLong), ignore_index, block_rows,
                                    consume_logits);
}

}  // namespace stratum::nn
