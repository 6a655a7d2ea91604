#pragma once
// The CUDA kernels behind nn::chunked_cross_entropy on a GPU
// (cross_entropy_cuda.cu): plain pointers, no torch headers, so nvcc compiles
// only this. One thread block per row of logits; nothing of the row's size is
// written in fp32.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::nn::cuda {

using stratum::cuda::Dtype;

struct CrossEntropyRows {
  int64_t rows = 0, vocab = 0;
  int64_t row_stride = 0;        // elements between consecutive rows of logits
  const void* logits = nullptr;  // [rows, vocab] in `dtype`, unit stride along the vocabulary
  Dtype dtype = Dtype::bf16;
  const int64_t* targets = nullptr;  // [rows]
  int64_t ignore_index = -100;
  float* lse = nullptr;  // [rows]: log-sum-exp of each row
};

// Forward: lse[r] and logp[r] = logit[r, target] - lse[r] (0 where ignored).
cudaError_t launch_cross_entropy_forward(const CrossEntropyRows& rows, float* logp, cudaStream_t stream);

// Backward: grad[r, j] = (exp(logit - lse) - [j == target]) * (*scale), 0 on
// ignored rows; grad has the logits' dtype and `grad_row_stride`.
cudaError_t launch_cross_entropy_backward(const CrossEntropyRows& rows, const float* scale, void* grad,
                                          int64_t grad_row_stride, cudaStream_t stream);

}  // namespace stratum::nn::cuda
