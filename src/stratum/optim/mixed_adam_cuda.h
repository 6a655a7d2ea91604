#pragma once
// The CUDA kernel behind optim::adam_step_mixed (mixed_adam_cuda.cu): plain
// pointers and no torch headers, so nvcc compiles only this.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::optim::cuda {

using stratum::cuda::Dtype;

struct MixedAdamArgs {
  int64_t n = 0;
  float* master = nullptr;      // fp32, updated in place
  float* exp_avg = nullptr;     // fp32, updated in place
  float* exp_avg_sq = nullptr;  // fp32, updated in place
  const void* grad = nullptr;   // grad_dtype; read only (left scaled, unlike torch's fused Adam)
  Dtype grad_dtype = Dtype::bf16;
  void* params16 = nullptr;     // params16_dtype: the updated master rounded; may be null
  Dtype params16_dtype = Dtype::bf16;
  const float* step = nullptr;        // device: the step count, already incremented
  const float* grad_scale = nullptr;  // device: the kernel uses grad / *grad_scale; may be null
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = true;  // AdamW (decoupled decay) or Adam with L2
  bool bias_correction = true;  // false: m and v used as they are (step_size = lr, sqrt(bc2) = 1)
};

// Enqueues the update on `stream`; returns the launch error, if any.
cudaError_t launch_mixed_adam(const MixedAdamArgs& args, cudaStream_t stream);

}  // namespace stratum::optim::cuda
