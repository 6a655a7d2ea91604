#pragma once
// CUDA kernels for the elementwise work libtorch runs as several kernels
// (fused_elementwise_cuda.cu): SwiGLU and RoPE each way, LayerNorm's backward
// with the residual gradient added, the bias gradient (a column sum), and the
// tanh-GELU backward with its bias gradient in the same pass.
// Plain pointers, no torch headers, so nvcc compiles only this. 16-bit or
// fp32 tensors; arithmetic and sums in fp32.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::nn::cuda {

using stratum::cuda::Dtype;

// A row-major matrix [rows, cols] whose rows are `ld` elements apart.
struct Matrix {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
};

// out[r, c] = silu(gate_up[r, c]) * gate_up[r, F + c], F = gate_up.cols / 2;
// out is contiguous [rows, F]. With `amax` (a zeroed fp32 on the device):
// also max |out| over the written values, from the same pass (what an FP8
// cast of out would otherwise read out again for).
cudaError_t launch_swiglu_forward(Matrix gate_up, Dtype dtype, void* out, cudaStream_t stream,
                                  float* amax = nullptr);

// d_gate_up [rows, 2F], contiguous: the gate half d_out * up * silu'(gate),
// the up half d_out * silu(gate). d_out is contiguous [rows, F]. With `out`
// (else null), also the forward's value, recomputed: contiguous [rows, F].
cudaError_t launch_swiglu_backward(Matrix gate_up, const void* d_out, Dtype dtype, void* d_gate_up, void* out,
                                   cudaStream_t stream);

// Floats of workspace the column sums below need (one row of partial sums per
// tile of rows; no zeroing needed).
int64_t column_sum_workspace_floats(int64_t rows, int64_t cols);

// bias_grad[c] = sum over rows of g[r, c], deterministic (fixed order).
cudaError_t launch_column_sum(Matrix g, Dtype dtype, float* workspace, void* bias_grad, cudaStream_t stream);

// out = gelu_tanh(h) over n contiguous elements (ATen's formula in fp32,
// rounded to dtype). With `amax` (a zeroed fp32 on the device): also max
// |out| over the stored values, from the same pass, for an FP8 cast of out.
cudaError_t launch_gelu_tanh_forward(const void* h, int64_t n, Dtype dtype, void* out, cudaStream_t stream,
                                     float* amax = nullptr);

// dh = dy * gelu_tanh'(h) (contiguous [rows, cols], rounded to dtype) and
// bias_grad[c] = sum over rows of the rounded dh[r, c]. dy and h contiguous;
// dh may be dy (in place). With gelu_h (else null), also gelu_tanh(h) there,
// recomputed for a backward that did not keep it.
cudaError_t launch_gelu_tanh_backward_bias(const void* dy, const void* h, int64_t rows, int64_t cols, Dtype dtype,
                                           void* dh, void* gelu_h, float* workspace, void* bias_grad,
                                           cudaStream_t stream);

// LayerNorm's input gradient plus the residual gradient, one block a row:
// dh[r] = dh_ext[r] + rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma,
// xhat = (h - mean) rstd; dh_ext may be null. All [rows, cols] contiguous;
// mean and rstd fp32 [rows] (ATen's native_layer_norm's).
struct LayerNormBackward {
  const void *h = nullptr, *dy = nullptr, *dh_ext = nullptr, *gamma = nullptr;
  const float *mean = nullptr, *rstd = nullptr;
  int64_t rows = 0, cols = 0;
  void* dh = nullptr;
};
cudaError_t launch_layer_norm_backward_input(const LayerNormBackward& a, Dtype dtype, cudaStream_t stream);

// gamma_grad[c] = sum over rows of dy * xhat, beta_grad[c] = sum of dy
// (deterministic column sums; workspace as column_sum_workspace_floats).
cudaError_t launch_layer_norm_backward_params(const LayerNormBackward& a, Dtype dtype, float* workspace,
                                              void* gamma_grad, void* beta_grad, cudaStream_t stream);

// RoPE on x [B, H, T, D] (any strides, unit stride along D): for each pair
// (d, d + D/2), y[d] = x[d] cos[t, d] - x[d + D/2] sin[t, d] and
// y[d + D/2] = x[d + D/2] cos[t, d + D/2] + x[d] sin[t, d + D/2]; with
// `transpose` the exact gradient instead (the rotation's transpose). cos and
// sin: contiguous [T, D] in x's dtype. y: [B, H, T, D] with strides `y_stride`.
struct Rotary {
  const void* x = nullptr;
  int64_t size[4] = {0, 0, 0, 0};
  int64_t x_stride[4] = {0, 0, 0, 1};
  const void *cos = nullptr, *sin = nullptr;
  int64_t cos_batch_stride = 0;  // 0: cos/sin [T, D] for every row; T * D: [B, T, D] (positions per row)
  void* y = nullptr;
  int64_t y_stride[4] = {0, 0, 0, 1};
  bool transpose = false;
};
cudaError_t launch_rotary(const Rotary& r, Dtype dtype, cudaStream_t stream);

}  // namespace stratum::nn::cuda
