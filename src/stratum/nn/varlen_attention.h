#pragma once
// Causal attention over packed rows by variable-length flash attention: each
// run of a row (an example, or the padding after the last one) attends
// within itself, and no mask is built or read (nn/sequence_layout.h keeps
// the runs). CUDA, fp16 or bf16, head_dim a multiple of 8 up to 256
// (varlen_attention_applies); elsewhere attention takes a mask instead.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace stratum::nn {

// The sequences the kernel reads: the runs' cumulative offsets over the
// flattened [B * T] positions (int32 [runs + 1], on the device) and the
// longest run.
struct VarlenSequences {
  at::Tensor cu_seqlens;
  int64_t max_length = 0;
};

bool varlen_attention_applies(const at::Tensor& q, const at::Tensor& k);

// q: [B, H, T, D]; k, v: [B, KV, T, D] with H % KV == 0 (grouped heads read
// by the kernel, not repeated). Returns [B, H, T, D]; differentiable in q,
// k, v. Dropout on the attention weights when dropout_p > 0.
at::Tensor varlen_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const VarlenSequences& sequences, double dropout_p);

}  // namespace stratum::nn
