#pragma once
// RMSNorm's and LayerNorm's forward as one kernel, one warp a row, that also
// takes max |output| in the same pass: the amax the FP8 cast of the next
// projection's input would otherwise read the output again for. The
// statistics it writes are the ones ATen's forward saves (fp32, one a row), so
// ATen's backward and launch_layer_norm_backward_* take them unchanged.
// Plain pointers, no torch headers, so nvcc compiles only this; arithmetic in
// fp32, each output rounded once.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::nn::cuda {

using stratum::cuda::Dtype;

// y[r] = gamma * (rstd[r] * (x[r] - mean[r])) + beta in fp32 (ATen's order).
// With `beta`: LayerNorm (mean written; rstd = 1 / sqrt(biased variance +
// eps)). Without: RMSNorm (mean 0 and not written; rstd = 1 / sqrt(mean(x^2)
// + eps)). x and y
// contiguous [rows, cols]; gamma and beta [cols] in x's dtype; mean and rstd
// fp32 [rows]. With `amax` (a zeroed fp32 on the device): max |y| over the
// stored (rounded) values, NaN above Inf.
struct NormForward {
  const void *x = nullptr, *gamma = nullptr, *beta = nullptr;
  int64_t rows = 0, cols = 0;
  float eps = 0;
  void* y = nullptr;
  float *mean = nullptr, *rstd = nullptr, *amax = nullptr;
};
cudaError_t launch_norm_forward(const NormForward& a, Dtype dtype, cudaStream_t stream);

}  // namespace stratum::nn::cuda
