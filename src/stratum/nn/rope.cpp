#include "stratum/nn/rope.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "stratum/core/error.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/kernel_launch.h"
#endif

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

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin_at(const at::Tensor& position_ids, at::ScalarType dtype,
                                                              int64_t length) {
  // A position never exceeds its index in the row, so the first T rows hold them all.
  const int64_t b = position_ids.size(0), t = position_ids.size(1);
  const auto [cos, sin] = cos_sin(std::max(t, length), position_ids.device(), dtype);
  const at::Tensor flat = position_ids.reshape({-1});
  return {cos.index_select(0, flat).view({b, t, head_dim_}), sin.index_select(0, flat).view({b, t, head_dim_})};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x * cos + rotate_half(x) * sin, or with `transpose` the rotation's transpose
// (the gradient): dy * cos + cat((dy * sin)[D/2:], -(dy * sin)[:D/2]).
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
  const int64_t d = x.size(-1), half = d / 2;
#ifdef STRATUM_WITH_CUDA_KERNELS
  // x may be strided (a transposed view of the q/k projection); cos and sin contiguous.
  if (x.dim() == 4 && x.stride(3) == 1 && cuda::on_gpu_in_one_dtype({&x, &cos, &sin}) &&
      cuda::use_kernels({&cos, &sin}) && sin.sizes() == cos.sizes() && cos.is_contiguous() && sin.is_contiguous() &&
      ((cos.dim() == 2 && cos.size(0) == x.size(2) && cos.size(1) == d) ||
       (cos.dim() == 3 && cos.size(0) == x.size(0) && cos.size(1) == x.size(2) && cos.size(2) == d))) {
    c10::cuda::CUDAGuard guard(x.device());
    // [B, T, H, D] in memory, as the ATen composition left it for attention.
    at::Tensor y = at::empty({x.size(0), x.size(2), x.size(1), d}, x.options()).transpose(1, 2);
    cuda::Rotary r;
    r.x = x.const_data_ptr();
    r.cos = cos.const_data_ptr();
    r.sin = sin.const_data_ptr();
    r.cos_batch_stride = cos.dim() == 3 ? cos.size(1) * d : 0;
    r.y = y.data_ptr();
    for (int i = 0; i < 4; ++i) {
      r.size[i] = x.size(i);
      r.x_stride[i] = x.stride(i);
      r.y_stride[i] = y.stride(i);
    }
    r.transpose = transpose;
    cuda::check_launch(cuda::launch_rotary(r, cuda::dtype_of(x), cuda::current_stream()),
                       "fused elementwise kernel: rotary");
    return y;
  }
#endif
  // Positions per row ([B, T, D]) broadcast over x's heads ([B, H, T, D]).
  const at::Tensor c = cos.dim() == 3 && x.dim() == 4 ? cos.unsqueeze(1) : cos;
  const at::Tensor s = sin.dim() == 3 && x.dim() == 4 ? sin.unsqueeze(1) : sin;
  if (!transpose) return x * c + at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * s;
  const at::Tensor ds = x * s;
  return x * c + at::cat({ds.narrow(-1, half, half), -ds.narrow(-1, 0, half)}, -1);
}

struct Rotary : torch::autograd::Function<Rotary> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, /*transpose=*/false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], /*transpose=*/true), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (!x.defined() || x.dim() < 2 || x.size(-1) % 2 != 0)
    throw Error("rotary: x must be [..., seq, head_dim] with an even head_dim, got " +
                (x.defined() ? c10::str(x.sizes()) : std::string("an undefined tensor")));
  return Rotary::apply(x, cos, sin);
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) { return rotary(x, cos, sin); }

}  // namespace stratum::nn
