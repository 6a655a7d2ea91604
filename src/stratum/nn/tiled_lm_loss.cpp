#include "stratum/nn/tiled_lm_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kRowAlign = 64;

// The weight the tiles' GEMMs read: on a GPU padded with zero rows to a
// multiple of 64 (cuBLAS's fast kernels want aligned shapes), elsewhere itself.
at::Tensor gemm_weight(const at::Tensor& w) {
  const int64_t v = w.size(0), pad = (kRowAlign - v % kRowAlign) % kRowAlign;
  if (!w.is_cuda() || pad == 0) return w;
  return at::constant_pad_nd(w, {0, 0, 0, pad});
}

struct TiledLMHeadLoss : torch::autograd::Function<TiledLMHeadLoss> {
  // hidden [..., C], weight [V, C], targets [N] int64 (N: hidden's rows).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t ignore_index, int64_t tile_rows) {
    const at::Tensor hidden_rows = hidden.reshape({-1, hidden.size(-1)});
    const int64_t n = hidden_rows.size(0), v = weight.size(0);
    const at::Tensor valid = targets.ne(ignore_index);
    const at::Tensor safe_targets = targets.masked_fill(valid.logical_not(), 0);
    const auto f32 = hidden_rows.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({n}, f32), picked = at::empty({n}, f32);  // picked: the target's logit
    const at::Tensor w = gemm_weight(weight);
    for (int64_t r = 0; r < n; r += tile_rows) {
      const int64_t len = std::min(tile_rows, n - r);
      const at::Tensor logits = at::mm(hidden_rows.narrow(0, r, len), w.t()).narrow(1, 0, v);  // model dtype
      const at::Tensor lf = logits.to(at::kFloat);
      lse.narrow(0, r, len).copy_(at::logsumexp(lf, {1}));
      picked.narrow(0, r, len).copy_(lf.gather(1, safe_targets.narrow(0, r, len).unsqueeze(1)).squeeze(1));
    }
    const at::Tensor count = valid.sum().to(at::kFloat);
    // The hidden states and the weight parameter themselves (ZeRO-3 swaps a
    // parameter's storage; a saved view would pin the old one).
    ctx->save_for_backward({hidden, weight, safe_targets, valid, lse, count});
    ctx->saved_data["tile_rows"] = tile_rows;
    return ((lse - picked) * valid).sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &weight = saved[1], &targets = saved[2], &valid = saved[3], &lse = saved[4], &count = saved[5];
    const at::Tensor h = saved[0].reshape({-1, saved[0].size(-1)});
    const int64_t tile_rows = ctx->saved_data["tile_rows"].toInt();
    const int64_t n = h.size(0), v = weight.size(0);
    const bool want_h = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    // d loss / d logit = (softmax - onehot) * g / count on valid rows, 0 elsewhere.
    const at::Tensor row_scale = valid.to(at::kFloat) * (grads[0].to(at::kFloat) / count);
    const at::Tensor w = gemm_weight(weight);
    const int64_t vp = w.size(0);
    at::Tensor gh = want_h ? at::empty_like(h) : at::Tensor();
    at::Tensor gw = want_w ? at::zeros({vp, h.size(1)}, weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t r = 0; r < n && (want_h || want_w); r += tile_rows) {
      const int64_t len = std::min(tile_rows, n - r);
      const at::Tensor ht = h.narrow(0, r, len);
      at::Tensor p = at::mm(ht, w.t()).narrow(1, 0, v).to(at::kFloat);
      p.sub_(lse.narrow(0, r, len).unsqueeze(1)).exp_();  // softmax from the kept log-sum-exp
      p.scatter_add_(1, targets.narrow(0, r, len).unsqueeze(1), at::full({len, 1}, -1.0f, p.options()));
      p.mul_(row_scale.narrow(0, r, len).unsqueeze(1));
      // The logits' gradient in the model's dtype (as the untiled loss stores it), padded columns zero.
      at::Tensor d = vp == v ? p.to(h.scalar_type()) : at::zeros({len, vp}, h.options());
      if (vp != v) d.narrow(1, 0, v).copy_(p);
      p.reset();
      if (want_h) gh.narrow(0, r, len).copy_(d.mm(w));
      if (want_w) {
        if (d.scalar_type() == at::kFloat) gw.addmm_(d.t(), ht);
        else gw.add_(d.t().mm(ht));
      }
    }
    at::Tensor gw_out;
    if (want_w) gw_out = (vp == v ? gw : gw.narrow(0, 0, v)).to(weight.scalar_type());
    return {want_h ? gh.view(saved[0].sizes()) : at::Tensor(), gw_out, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor tiled_lm_head_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                              int64_t ignore_index, int64_t tile_rows) {
  const auto shape = [](const at::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : std::string("undefined"); };
  if (!hidden.defined() || !weight.defined() || !targets.defined() || hidden.dim() < 1 || weight.dim() != 2 ||
      weight.size(1) != hidden.size(-1) || !at::isFloatingType(hidden.scalar_type()) ||
      hidden.sizes().slice(0, hidden.dim() - 1) != targets.sizes())
    throw Error("tiled_lm_head_loss: need hidden [..., C] floating, weight [V, C] and targets of hidden's leading "
                "shape; got hidden " + shape(hidden) + ", weight " + shape(weight) + ", targets " + shape(targets));
  if (tile_rows < 1) throw Error("tiled_lm_head_loss: tile_rows must be >= 1, got " + std::to_string(tile_rows));
  if (weight.scalar_type() != hidden.scalar_type())
    throw Error("tiled_lm_head_loss: hidden is " + std::string(c10::toString(hidden.scalar_type())) +
                " but the weight " + std::string(c10::toString(weight.scalar_type())));
  return TiledLMHeadLoss::apply(hidden, weight, targets.reshape({-1}).to(at::kLong), ignore_index, tile_rows);
}

}  // namespace stratum::nn
