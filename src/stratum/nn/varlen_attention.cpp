#include "stratum/nn/varlen_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [total, heads, D] -> [total, heads, D] through ATen's flash kernels (FlashAttention-2).
struct VarlenFlash : torch::autograd::Function<VarlenFlash> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens, int64_t max_length, double dropout_p) {
    auto [out, logsumexp, rng_state, unused, debug] = at::_flash_attention_forward(
        q, k, v, cu_seqlens, cu_seqlens, max_length, max_length, dropout_p, /*is_causal=*/true,
        /*return_debug_mask=*/false);
    (void)debug;
    ctx->save_for_backward({q, k, v, out, logsumexp, cu_seqlens, rng_state, unused});
    ctx->saved_data["max_length"] = max_length;
    ctx->saved_data["dropout_p"] = dropout_p;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const int64_t max_length = ctx->saved_data["max_length"].toInt();
    auto [dq, dk, dv] = at::_flash_attention_backward(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], s[5], s[5],
                                                      max_length, max_length, ctx->saved_data["dropout_p"].toDouble(),
                                                      /*is_causal=*/true, s[6], s[7]);
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// [B, n, T, D] -> [B * T, n, D], a view where the layout allows.
at::Tensor tokens_first(const at::Tensor& x) {
  const at::Tensor t = x.transpose(1, 2);
  at::Tensor flat = t.reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
  return flat.stride(-1) == 1 ? flat : flat.contiguous();
}

}  // namespace

bool varlen_attention_applies(const at::Tensor& q, const at::Tensor& k) {
  const int64_t d = q.size(-1);
  return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) &&
         k.scalar_type() == q.scalar_type() && d % 8 == 0 && d <= 256 && q.size(1) % k.size(1) == 0;
}

at::Tensor varlen_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const VarlenSequences& sequences, double dropout_p) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  if (!sequences.cu_seqlens.defined() || sequences.cu_seqlens.device() != q.device())
    throw Error("variable-length attention: the sequences' offsets are not on the queries' device");
  const at::Tensor out = VarlenFlash::apply(tokens_first(q), tokens_first(k), tokens_first(v), sequences.cu_seqlens,
                                            sequences.max_length, dropout_p);
  return out.view({b, t, h, d}).transpose(1, 2);
}

}  // namespace stratum::nn
