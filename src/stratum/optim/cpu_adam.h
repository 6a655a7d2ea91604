#pragma once
// Adam / AdamW on the CPU for optimizer offload: one fused, vectorized,
// multithreaded pass over flat fp32 buffers (AVX-512 where the CPU has it,
// AVX2+FMA otherwise, scalar fallback; chosen at run time, so the binary runs on
// any x86-64). Math and order of operations follow torch::optim::Adam / AdamW:
//   g  = grad / grad_scale
//   decoupled: p *= 1 - lr wd          L2 (wd != 0): g += wd p
//   m  = b1 m + (1 - b1) g             v = b2 v + (1 - b2) g g
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps),   bc_i = 1 - b_i^step
//   (bias_correction false: bc_i = 1, DeepSpeed's CPUAdam with bias_correction False)
// Scalars are computed in double once per call and applied in fp32, as torch does.
// Optionally the updated params are also written rounded to bf16 or fp16 (round
// to nearest even, NaN stays NaN, as torch's .to()) in the same pass: the copy a
// GPU needs back.
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "stratum/optim/cpu_isa.h"

namespace stratum::optim {

struct CpuAdamStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = true;  // AdamW; false: L2 (Adam's weight decay)
  bool bias_correction = true;
  int64_t step = 1;       // 1-based: the step being taken
  double grad_scale = 1.0;
  int num_threads = 0;    // 0: at::get_num_threads(); at most the machine's hardware threads
};

// Threads for a share of the machine's hardware threads
// (offload_optimizer.cpuadam_cores_perc), split between the `ranks_per_node`
// ranks that share the host: at least 1, at most all of them.
int cpu_adam_threads(double cores_perc, int ranks_per_node = 1);

// One step in place on n elements. params_16bit (optional, n elements): receives
// the updated params rounded to `format`.
void cpu_adam_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                   const CpuAdamStep& s, uint16_t* params_16bit = nullptr, Copy16 format = Copy16::bf16);

// The same on tensors: all fp32, contiguous, on the CPU, of equal numel;
// params_16bit, when defined, bf16 or fp16 (its dtype picks the copy),
// contiguous, CPU, of that numel. Throws stratum::Error naming the tensor at fault.
void cpu_adam_step(at::Tensor& params, const at::Tensor& grads, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                   const CpuAdamStep& s, const at::Tensor& params_16bit = at::Tensor());

}  // namespace stratum::optim
