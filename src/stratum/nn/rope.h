#pragma once
// Rotary position embeddings (RoPE) in Hugging Face LLaMA's convention: the
// head dimension is split into two halves that rotate together
// (rotate_half), not interleaved pairs, so HF's q_proj/k_proj weights are used
// as they are. Frequencies: inv_freq[i] = 1 / theta^(2i / head_dim), angle at
// position p = p * inv_freq[i], computed in fp32.
//
// Optional "llama3" frequency scaling (Llama 3.1 and later, for long context):
// wavelengths longer than original_max_seq_len / low_freq_factor are stretched
// by `factor`, those shorter than original_max_seq_len / high_freq_factor kept,
// the band between interpolated smoothly (HF's _compute_llama3_parameters).
#include <cstdint>
#include <mutex>
#include <utility>

#include <ATen/core/Tensor.h>

namespace stratum::nn {

struct RopeScaling {
  double factor = 0;  // 0: no scaling
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_seq_len = 8192;
};

class RotaryEmbedding {
 public:
  RotaryEmbedding(int64_t head_dim, double theta, RopeScaling scaling = {});

  // inv_freq [head_dim / 2], fp32, scaling applied.
  at::Tensor inverse_frequencies(c10::Device device) const;

  // cos and sin for positions [0, seq_len), shape [seq_len, head_dim], in
  // `dtype` on `device`. Computed in fp32 once per device and extended on demand.
  std::pair<at::Tensor, at::Tensor> cos_sin(int64_t seq_len, c10::Device device, at::ScalarType dtype);

  // cos and sin at each row's own positions (packed rows, nn/sequence_layout.h):
  // position_ids int64 [B, T], each below `length` (0: T; a context-parallel
  // rank's part of a longer sequence gives that sequence's); [B, T, head_dim] in `dtype`.
  std::pair<at::Tensor, at::Tensor> cos_sin_at(const at::Tensor& position_ids, at::ScalarType dtype,
                                               int64_t length = 0);

  int64_t head_dim() const { return head_dim_; }
  double theta() const { return theta_; }

 private:
  int64_t head_dim_;
  double theta_;
  RopeScaling scaling_;
  std::mutex mutex_;
  at::Tensor cos_, sin_;  // fp32 cache, [cached_len, head_dim]
};

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1) over the last
// dimension's halves. x: [..., seq, head_dim]; cos/sin: [seq, head_dim], or
// [B, seq, head_dim] for x [B, heads, seq, head_dim] (each row's positions).
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// What apply_rotary runs, x's shape checked: one autograd function, cos/sin
// constant (no gradient for them), its backward the rotation's transpose; one
// kernel each way on a GPU (nn/fused_elementwise_cuda.cu), the ATen
// composition elsewhere.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace stratum::nn
