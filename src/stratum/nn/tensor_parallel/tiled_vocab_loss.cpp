#include "stratum/nn/tensor_parallel/tiled_vocab_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "stratum/core/error.h"
#include "stratum/nn/tensor_parallel/vocab_softmax.h"

namespace stratum::nn::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct TiledVocabParallelLoss : torch::autograd::Function<TiledVocabParallelLoss> {
  // hidden [..., C], weight [Vl, C], targets [N] int64 global ids.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t group_address, int64_t start, int64_t valid,
                            int64_t ignore_index, int64_t tile_rows) {
    auto& group = *reinterpret_cast<distributed::Communicator*>(static_cast<intptr_t>(group_address));
    const at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
    const int64_t n = h.size(0);
    const at::Tensor live = targets.ne(ignore_index);
    const at::Tensor column = local_target_columns(targets, start, valid, ignore_index);
    VocabRowStats stats = VocabRowStats::empty(n, h.options());
    for (int64_t r = 0; valid > 0 && r < n; r += tile_rows) {
      const int64_t len = std::min(tile_rows, n - r);
      // The logits in the model's dtype (as the untiled head makes them), the softmax in fp32.
      stats.add(r, at::mm(h.narrow(0, r, len), weight.t()).narrow(1, 0, valid).to(at::kFloat), column.narrow(0, r, len));
    }
    const at::Tensor lse = stats.group_log_sum_exp(group);
    const at::Tensor count = live.sum().to(at::kFloat);
    // The hidden states and the weight parameter themselves (ZeRO-3 swaps a
    // parameter's storage; under sequence parallelism the region frees and
    // gathers again the hidden states it gave, mappings.h's through_region).
    ctx->save_for_backward({hidden, weight, column, live, lse, count});
    ctx->saved_data["valid"] = valid;
    ctx->saved_data["tile_rows"] = tile_rows;
    return ((lse - stats.sums[1]) * live).sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &weight = saved[1], &column = saved[2], &live = saved[3], &lse = saved[4], &count = saved[5];
    const at::Tensor h = saved[0].reshape({-1, saved[0].size(-1)});
    const int64_t valid = ctx->saved_data["valid"].toInt(), tile_rows = ctx->saved_data["tile_rows"].toInt();
    const int64_t n = h.size(0), rows = weight.size(0);
    const bool want_h = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    const at::Tensor row_scale = live.to(at::kFloat) * (grads[0].to(at::kFloat) / count);
    at::Tensor gh = want_h ? at::zeros_like(h) : at::Tensor();
    at::Tensor gw = want_w ? at::zeros({rows, h.size(1)}, weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t r = 0; valid > 0 && r < n && (want_h || want_w); r += tile_rows) {
      const int64_t len = std::min(tile_rows, n - r);
      const at::Tensor ht = h.narrow(0, r, len);
      // .to(kFloat) of model-dtype logits is a new tensor (fp32 logits: the mm's own), free to write over.
      at::Tensor p = at::mm(ht, weight.t()).narrow(1, 0, valid).to(at::kFloat);
      logit_gradient_(p, lse.narrow(0, r, len), column.narrow(0, r, len), row_scale.narrow(0, r, len));
      // The logits' gradient in the model's dtype, the padding rows' columns zero.
      at::Tensor d = at::zeros({len, rows}, h.options());
      d.narrow(1, 0, valid).copy_(p);
      p.reset();
      if (want_h) gh.narrow(0, r, len).copy_(d.mm(weight));  // this shard's part: the region sums the ranks'
      if (want_w) {
        if (d.scalar_type() == at::kFloat) gw.addmm_(d.t(), ht);
        else gw.add_(d.t().mm(ht));
      }
    }
    return {want_h ? gh.view(saved[0].sizes()) : at::Tensor(), want_w ? gw.to(weight.scalar_type()) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor tiled_vocab_parallel_lm_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                        const VocabShard& shard, const TensorParallel& tp, int64_t tile_rows,
                                        int64_t ignore_index) {
  const auto shape = [](const at::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : std::string("undefined"); };
  if (!hidden.defined() || !weight.defined() || !targets.defined() || hidden.dim() < 1 || weight.dim() != 2 ||
      weight.size(1) != hidden.size(-1) || !at::isFloatingType(hidden.scalar_type()) ||
      hidden.sizes().slice(0, hidden.dim() - 1) != targets.sizes())
    throw Error("tiled_vocab_parallel_lm_loss: need hidden [..., C] floating, weight [V / size, C] and targets of "
                "hidden's leading shape; got hidden " + shape(hidden) + ", weight " + shape(weight) + ", targets " +
                shape(targets));
  if (weight.size(0) != shard.rows)
    throw Error("tiled_vocab_parallel_lm_loss: the weight has " + std::to_string(weight.size(0)) +
                " rows but this rank's vocabulary shard has " + std::to_string(shard.rows));
  if (tile_rows < 1) throw Error("tiled_vocab_parallel_lm_loss: tile_rows must be >= 1, got " + std::to_string(tile_rows));
  if (!tp.group) throw Error("tiled_vocab_parallel_lm_loss: no tensor-parallel group");
  return TiledVocabParallelLoss::apply(hidden, weight, targets.reshape({-1}).to(at::kLong),
                                       static_cast<int64_t>(reinterpret_cast<intptr_t>(tp.group.get())), shard.start,
                                       shard.valid, ignore_index, tile_rows);
}

}  // namespace stratum::nn::tp
