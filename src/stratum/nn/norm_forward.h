#pragma once
// RMSNorm's and LayerNorm's forward through the kernel that also takes the
// output's amax (nn/norm_forward_cuda.h), for a norm whose output an FP8
// projection casts tensorwise: the cast then needs no amax pass of its own.
// The statistics come shaped as ATen's forward saves them, for its backward.
#include <ATen/core/Tensor.h>

namespace stratum::nn {

struct NormForwardResult {
  at::Tensor y;
  at::Tensor mean;  // LayerNorm only; fp32 [..., 1]
  at::Tensor rstd;  // fp32 [..., 1]
  at::Tensor amax;  // fp32 0-dim: max |y|
};

// Whether the kernel runs: a build with the CUDA kernels, x contiguous on a
// GPU, weight (and bias) [C] in x's dtype on the same device.
bool norm_kernel_usable(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// LayerNorm of x over its last dimension when `bias` is defined, RMSNorm when
// not; only where norm_kernel_usable (else an error naming the tensors).
NormForwardResult norm_forward_with_amax(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                         double eps);

}  // namespace stratum::nn
