#include "stratum/nn/rope.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"

namespace stratum::nn {

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw Error("RoPE: head dimension must be even and positive, got " + std::to_string(head_dim));
  if (!(theta > 0)) throw Error("RoPE: theta must be positive, got " + std::to_string(theta));
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin(int64_t seq_len, c10::Device device,
                                                           at::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cos_.defined() || cos_.device() != device || cos_.size(0) < seq_len) {
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    // Same operations as HF: float32 pow, then an outer product of positions and frequencies.
    const at::Tensor inv_freq = 1.0 / at::pow(theta_, at::arange(0, head_dim_, 2, f32) / static_cast<double>(head_dim_));
    const at::Tensor positions = at::arange(seq_len, f32);
    const at::Tensor freqs = at::outer(positions, inv_freq);
    const at::Tensor angles = at::cat({freqs, freqs}, -1);
    cos_ = angles.cos();
    sin_ = angles.sin();
  }
  return {cos_.narrow(0, 0, seq_len).to(dtype), sin_.narrow(0, 0, seq_len).to(dtype)};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half);
  const at::Tensor x2 = x.narrow(-1, half, half);
  return x * cos + at::cat({-x2, x1}, -1) * sin;
}

}  // namespace stratum::nn
