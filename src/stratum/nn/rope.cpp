#include "stratum/nn/rope.h"

#include <ATen/ATen.h>

#include <cmath>

#include "stratum/core/error.h"
#include "stratum/nn/fused_ops.h"

namespace stratum::nn {

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, double theta, RopeScaling scaling)
    : head_dim_(head_dim), theta_(theta), scaling_(scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw Error("RoPE: head dimension must be even and positive, got " + std::to_string(head_dim));
  if (!(theta > 0)) throw Error("RoPE: theta must be positive, got " + std::to_string(theta));
  if (scaling.factor != 0 && !(scaling.factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor &&
                               scaling.low_freq_factor > 0 && scaling.original_max_seq_len > 0))
    throw Error("RoPE scaling: need factor > 0, high_freq_factor > low_freq_factor > 0, original_max_seq_len > 0");
}

at::Tensor RotaryEmbedding::inverse_frequencies(c10::Device device) const {
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  // Same operations as HF: float32 pow of the even indices over head_dim.
  at::Tensor inv_freq = 1.0 / at::pow(theta_, at::arange(0, head_dim_, 2, f32) / static_cast<double>(head_dim_));
  if (scaling_.factor == 0) return inv_freq;
  const double factor = scaling_.factor, low = scaling_.low_freq_factor, high = scaling_.high_freq_factor;
  const double original = static_cast<double>(scaling_.original_max_seq_len);
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  const at::Tensor long_waves = wavelen > original / low;
  const at::Tensor scaled = at::where(long_waves, inv_freq / factor, inv_freq);
  const at::Tensor smooth = (original / wavelen - low) / (high - low);
  const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const at::Tensor medium = (wavelen >= original / high).logical_and(long_waves.logical_not());
  return at::where(medium, smoothed, scaled);
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin(int64_t seq_len, c10::Device device,
                                                           at::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cos_.defined() || cos_.device() != device || cos_.size(0) < seq_len) {
    const at::Tensor positions = at::arange(seq_len, at::TensorOptions().dtype(at::kFloat).device(device));
    const at::Tensor freqs = at::outer(positions, inverse_frequencies(device));  // as HF: positions x frequencies
    const at::Tensor angles = at::cat({freqs, freqs}, -1);
    cos_ = angles.cos();
    sin_ = angles.sin();
  }
  return {cos_.narrow(0, 0, seq_len).to(dtype), sin_.narrow(0, 0, seq_len).to(dtype)};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return nn::rotary(x, cos, sin);
}

}  // namespace stratum::nn
