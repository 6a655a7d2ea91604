#include "stratum/nn/attention.h"

#include <ATen/ATen.h>

#include "stratum/nn/context_parallel/context_parallel.h"
#include "stratum/nn/tensor_parallel/float8_parallel_linear.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/random.h"

namespace stratum::nn {

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                            const SequenceLayout* rows) {
  if (rows && rows->context) return cp::context_attention(q, k, v, dropout_p, *rows->context);
  if (rows) return segment_attention(q, k, v, dropout_p, *rows);
  // enable_gqa (torch >= 2.5) groups query heads over k/v heads without
  // materializing repeated k/v; flash kernels support it.
  const bool grouped = q.size(1) != k.size(1);
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/grouped);
}

namespace {
// [B, T, n * D] -> [B, n, T, D]
at::Tensor split_heads(const at::Tensor& x, int64_t n) {
  return x.view({x.size(0), x.size(1), n, x.size(2) / n}).transpose(1, 2);
}
// [B, n, T, D] -> [B, T, n * D]
at::Tensor merge_heads(const at::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}
}  // namespace

FusedQKVAttentionImpl::FusedQKVAttentionImpl(int64_t hidden, int64_t heads, double dropout, double residual_dropout,
                                             tp::TensorParallel tp, c10::Device device)
    : torch::nn::Module("FusedQKVAttention"),
      heads(heads / tp.size()),
      dropout(dropout),
      residual_dropout(residual_dropout),
      tp(std::move(tp)) {
  const int64_t local = hidden / this->tp.size();
  c_attn = register_module("c_attn", Linear(hidden, 3 * local, /*bias=*/true, device));
  c_proj = register_module("c_proj", Linear(local, hidden, /*bias=*/true, device));
}

bool FusedQKVAttentionImpl::takes_input_amax() const { return tp::column_input_takes_amax(c_attn_fp8.get(), tp); }

at::Tensor FusedQKVAttentionImpl::forward(const at::Tensor& x, const at::Tensor& x_amax) {
  // HF packs q, k, v along the output dimension; under tensor parallelism
  // this rank's rows of each (its heads: models/tensor_parallel_plan.h).
  at::Tensor packed = c_attn_fp8 ? tp::column_parallel_float8_linear(x, {c_attn->weight}, c_attn->bias, *c_attn_fp8, tp,
                                                                      x_amax)
                    : c_attn->nf4_base ? tp::through_region(x, tp, [&](const at::Tensor& in) {
                        return frozen_linear(in, *c_attn, c_attn->bias);
                      })
                                       : tp::column_parallel_linear(x, c_attn->weight, c_attn->bias, tp);
  if (c_attn->has_lora()) packed = packed + column_parallel_lora(x, *c_attn, tp, is_training());
  const auto qkv = packed.chunk(3, -1);
  const double p = is_training() ? dropout : 0.0;
  const SequenceLayout* packed_rows = layout ? layout->get() : nullptr;
  const int64_t length = x.size(1) * (tp.sequence_parallel ? tp.size() : 1);
  const std::optional<SequenceLayout> rows =
      packed_rows ? std::optional(layout_of_length(*packed_rows, length)) : std::nullopt;
  auto attend = [&] {
    return causal_attention(split_heads(qkv[0], heads), split_heads(qkv[1], heads), split_heads(qkv[2], heads), p,
                            rows ? &*rows : nullptr);
  };
  // Dropout over this rank's heads draws from its own stream (tensor_parallel/random.h).
  const at::Tensor heads_out = merge_heads(p > 0 ? tp::with_rank_stream(tp, x.device(), attend) : attend());
  at::Tensor y = c_proj_fp8 ? tp::row_parallel_float8_linear(heads_out, c_proj->weight, c_proj->bias, *c_proj_fp8, tp)
                : c_proj->nf4_base ? tp::leave_region(frozen_linear(heads_out, *c_proj), tp) + c_proj->bias
                                  : tp::row_parallel_linear(heads_out, c_proj->weight, c_proj->bias, tp);
  if (c_proj->has_lora()) y = y + row_parallel_lora(heads_out, *c_proj, tp, is_training());
  return is_training() ? tp::dropout_outside_region(y, residual_dropout, tp) : y;
}

GroupedQueryAttentionImpl::GroupedQueryAttentionImpl(int64_t hidden, int64_t heads, int64_t kv_heads,
                                                     std::shared_ptr<RotaryEmbedding> rope, double dropout,
                                                     tp::TensorParallel tp, c10::Device device, int64_t head_dim,
                                                     double qk_norm_eps)
    : torch::nn::Module("GroupedQueryAttention"),
      heads(heads / tp.size()),
      // Fewer key/value heads than ranks: each rank holds the one its query heads read.
      kv_heads(kv_heads % tp.size() == 0 ? kv_heads / tp.size() : 1),
      head_dim(head_dim > 0 ? head_dim : hidden / heads),
      dropout(dropout),
      tp(std::move(tp)),
      rope(std::move(rope)) {
  auto linear = [device](int64_t in, int64_t out) { return Linear(in, out, /*bias=*/false, device); };
  q_proj = register_module("q_proj", linear(hidden, this->heads * this->head_dim));
  k_proj = register_module("k_proj", linear(hidden, this->kv_heads * this->head_dim));
  v_proj = register_module("v_proj", linear(hidden, this->kv_heads * this->head_dim));
  o_proj = register_module("o_proj", linear(this->heads * this->head_dim, hidden));
  if (qk_norm_eps > 0) {
    q_norm = register_module("q_norm", std::make_shared<RMSNormImpl>(this->head_dim, qk_norm_eps, device));
    k_norm = register_module("k_norm", std::make_shared<RMSNormImpl>(this->head_dim, qk_norm_eps, device));
  }
}

bool GroupedQueryAttentionImpl::takes_input_amax() const { return tp::column_input_takes_amax(qkv_fp8.get(), tp); }

at::Tensor GroupedQueryAttentionImpl::forward(const at::Tensor& x, const at::Tensor& x_amax) {
  // Under tensor parallelism the input enters the heads' region (gathered along the sequence under sequence parallelism).
  const int64_t length = x.size(1) * (tp.sequence_parallel ? tp.size() : 1);
  // Packed rows: each example's positions from 0, and attention within it.
  const SequenceLayout* packed = layout ? layout->get() : nullptr;
  const std::optional<SequenceLayout> rows = packed ? std::optional(layout_of_length(*packed, length)) : std::nullopt;
  const auto [cos, sin] = rows ? rope->cos_sin_at(rows->position_ids, x.scalar_type(),
                                                  rows->context ? rows->context->whole_length : 0)
                               : rope->cos_sin(length, x.device(), x.scalar_type());
  // One GEMM for the three projections (HF keeps them as three weights; 4-bit
  // ones dequantized side by side), and one each way for their adapters.
  const std::vector<const LinearImpl*> projections{q_proj.get(), k_proj.get(), v_proj.get()};
  const std::vector<int64_t> widths{heads * head_dim, kv_heads * head_dim, kv_heads * head_dim};
  std::vector<at::Tensor> qkv;
  if (qkv_fp8) {
    qkv = tp::column_parallel_float8_linear(x, {q_proj->weight, k_proj->weight, v_proj->weight}, at::Tensor(),
                                            *qkv_fp8, tp, x_amax)
              .split_with_sizes(widths, -1);
  } else if (!tp.enabled()) {
    qkv = add_lora_terms(frozen_linear_stacked(x, projections), x, projections, is_training())
              .split_with_sizes(widths, -1);
  } else {
    qkv = tp::through_region(x, tp, [&](const at::Tensor& in) { return frozen_linear_stacked(in, projections); })
              .split_with_sizes(widths, -1);
    for (int i = 0; i < 3; ++i)
      if (projections[i]->has_lora()) qkv[i] = qkv[i] + column_parallel_lora(x, *projections[i], tp, is_training());
  }
  at::Tensor q = split_heads(qkv[0], heads), k = split_heads(qkv[1], kv_heads);
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);
  const at::Tensor v = split_heads(qkv[2], kv_heads);
  const double p = is_training() ? dropout : 0.0;
  auto attend = [&] { return causal_attention(q, k, v, p, rows ? &*rows : nullptr); };
  const at::Tensor heads_out = merge_heads(p > 0 ? tp::with_rank_stream(tp, x.device(), attend) : attend());
  if (o_proj_fp8) return tp::row_parallel_float8_linear(heads_out, o_proj->weight, at::Tensor(), *o_proj_fp8, tp);
  const at::Tensor y = o_proj->nf4_base ? tp::leave_region(frozen_linear(heads_out, *o_proj), tp)
                                        : tp::row_parallel_linear(heads_out, o_proj->weight, at::Tensor(), tp);
  if (!o_proj->has_lora()) return y;
  return tp.enabled() ? y + row_parallel_lora(heads_out, *o_proj, tp, is_training())
                      : add_lora_terms(y, heads_out, {o_proj.get()}, is_training());
}

}  // namespace stratum::nn
