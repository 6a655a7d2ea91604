#pragma once
// Causal self-attention, through at::scaled_dot_product_attention (flash
// kernels on the GPU). Two shapes, named as in Hugging Face so that weights
// round-trip without renaming:
//   FusedQKVAttention   (GPT-2):  c_attn [3C, C] + bias, c_proj [C, C] + bias, all heads own k/v.
//   GroupedQueryAttention (LLaMA): q/k/v/o_proj without bias, RoPE on q and k,
//                                 `kv_heads` k/v heads shared by heads / kv_heads query heads each.
// Linear weights are stored [out, in] (torch); HF GPT-2's Conv1D stores [in, out]:
// models/hf_state_dict.h transposes.
// Under tensor parallelism (`tp`) each rank holds heads / size query heads
// (column-parallel projections split by head; the output projection row
// parallel); LLaMA's key/value heads split when the group divides them, else
// each rank holds the one its query heads read.
#include <memory>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "stratum/nn/parameter_modules.h"
#include "stratum/nn/rms_norm.h"
#include "stratum/nn/rope.h"
#include "stratum/nn/sequence_layout.h"
#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn {

namespace float8 {
class Float8Projection;
}

// q: [B, heads, T, D]; k, v: [B, kv_heads, T, D] with heads % kv_heads == 0.
// Query head h attends with k/v head h / (heads / kv_heads) (HF's repeat_kv).
// Dropout on the attention weights when dropout_p > 0. With `rows` (packed
// rows at q's length: nn/sequence_layout.h) a query reads only the keys of
// its own segment; with a context shard in them (context parallelism) q, k
// and v are this rank's tokens and attention meets the other ranks' tokens
// (nn/context_parallel/context_parallel.h).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                            const SequenceLayout* rows = nullptr);

class FusedQKVAttentionImpl : public torch::nn::Module {
 public:
  // `dropout`: on the attention probabilities; `residual_dropout`: on the output.
  // `device`: where the parameters are made (meta: shapes only, nn/parameter_modules.h).
  FusedQKVAttentionImpl(int64_t hidden, int64_t heads, double dropout, double residual_dropout,
                        tp::TensorParallel tp = {}, c10::Device device = c10::kCPU);
  // x_amax (optional, only where takes_input_amax): max |x| from the kernel
  // that wrote x (the norm before), for the input projection's FP8 cast.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& x_amax = at::Tensor());  // [B, T, C] -> [B, T, C]
  // Whether the input projection's FP8 cast takes its input's amax (nn/tensor_parallel/float8_parallel_linear.h).
  bool takes_input_amax() const;

  Linear c_attn{nullptr}, c_proj{nullptr};
  // Set (models/float8_layers.h): that projection's GEMMs in FP8; null: bf16.
  std::shared_ptr<float8::Float8Projection> c_attn_fp8, c_proj_fp8;
  int64_t heads;  // this rank's
  double dropout, residual_dropout;
  tp::TensorParallel tp;
  std::shared_ptr<const SequenceLayoutSlot> layout;  // the stack's packed rows, if any (null: none)
};

class GroupedQueryAttentionImpl : public torch::nn::Module {
 public:
  // `head_dim`: a head's width (0: hidden / heads). `qk_norm_eps` > 0: Qwen3's
  // RMSNorm over each query and key head (q_norm, k_norm [head_dim]) before RoPE.
  GroupedQueryAttentionImpl(int64_t hidden, int64_t heads, int64_t kv_heads, std::shared_ptr<RotaryEmbedding> rope,
                            double dropout, tp::TensorParallel tp = {}, c10::Device device = c10::kCPU,
                            int64_t head_dim = 0, double qk_norm_eps = 0);
  // x_amax (optional, only where takes_input_amax): max |x| from the kernel
  // that wrote x (the norm before), for the input projection's FP8 cast.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& x_amax = at::Tensor());  // [B, T, C] -> [B, T, C]
  // Whether the input projection's FP8 cast takes its input's amax (nn/tensor_parallel/float8_parallel_linear.h).
  bool takes_input_amax() const;

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  // Set (models/float8_layers.h): q/k/v's stacked GEMM, o_proj's, in FP8; null: bf16.
  std::shared_ptr<float8::Float8Projection> qkv_fp8, o_proj_fp8;
  std::shared_ptr<RMSNormImpl> q_norm, k_norm;  // null without qk_norm
  int64_t heads, kv_heads, head_dim;  // this rank's heads
  double dropout;
  tp::TensorParallel tp;
  std::shared_ptr<RotaryEmbedding> rope;  // shared by all layers; not a module (no state to save)
  std::shared_ptr<const SequenceLayoutSlot> layout;  // the stack's packed rows, if any (null: none)
};

}  // namespace stratum::nn
