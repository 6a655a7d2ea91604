#pragma once
// Lamb on the CPU for optimizer offload (optim/lamb.h has the math and the
// device path): the two passes over flat fp32 host buffers, vectorized (the
// ISA of cpu_adam_isa(): AVX-512, AVX2+FMA or scalar, STRATUM_CPU_ADAM_ISA
// forces one) and spread over threads in pieces of at most 64K elements. The
// result does not depend on the ISA or the number of threads: every path does
// the same fp32 operations per element (no contraction into FMAs) and sums the
// squares in double, lane by lane, in the same order.
//   pass 1: g = grad / grad_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
//           u = (m / bc1) / (sqrt(v / bc2) + eps) + wd p, bc_i = 1 - b_i^step (1
//           without bias correction); per run: sum p^2, sum u^2
//   pass 2: the same u from the updated m, v; p -= (lr r) u, r the run's
//           parameter's trust ratio; optionally p rounded to bf16/fp16 too.
// Elements outside the runs are not touched. No torch here: plain pointers
// (built with -fno-math-errno, so that sqrt vectorizes).
#include <cstdint>
#include <vector>

#include "stratum/optim/cpu_isa.h"
#include "stratum/optim/param_run.h"

namespace stratum::optim {

struct CpuLambStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool bias_correction = true;
  int64_t step = 1;  // 1-based: the step being taken (pass 2: the same as pass 1's)
  double grad_scale = 1.0;
  int num_threads = 1;  // at most the machine's hardware threads
};

// Pass 1. `runs`: offsets relative to the pointers (ascending, not
// overlapping); sq_params[run.param] += sum of p^2 and sq_updates[run.param] +=
// sum of u^2 over each run's elements.
void cpu_lamb_moments(const float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      const std::vector<ParamRun>& runs, const CpuLambStep& s, double* sq_params,
                      double* sq_updates);

// Pass 2 with trust_ratios[run.param]; params_16bit, when not null, gets the
// updated params of the runs rounded to `format` (nearest even, as torch's .to()).
void cpu_lamb_update(float* params, const float* exp_avg, const float* exp_avg_sq, const std::vector<ParamRun>& runs,
                     const CpuLambStep& s, const double* trust_ratios, uint16_t* params_16bit = nullptr,
                     Copy16 format = Copy16::bf16);

}  // namespace stratum::optim
