#pragma once
// The experts' GEMMs of a mixture-of-experts layer, all of a rank's experts
// in one call: rows of x sorted by expert, counts[e] rows for expert e, each
// row multiplied by its own expert's weights.
//
//   y[rows of e] = x[rows of e] [W_e^0; W_e^1; ...]ᵀ
//
// `blocks[j][e]` is block j of expert e's weight ([out_j, in]); the blocks of
// an expert stack along the output (gate and up: one GEMM for both, the
// result [rows, out_0 + out_1]). On a GPU in bf16 one grouped GEMM each way
// (ATen's _grouped_mm) over the experts' weights stacked [E, Σ out_j, in]:
// a view when they lie evenly spaced in one buffer (ZeRO's flat parameters
// keep an expert's blocks and the experts in registration order), else a
// copy; there too a loop of per-expert GEMMs where the mean expert's product
// is large enough to fill the GPU alone (measured faster at Mixtral's shape;
// STRATUM_MOE_GROUPED_GEMM=1 or 0 forces one path). Elsewhere the loop, which
// also serves a pass (forward, input gradient, weight gradient) whose
// operands _grouped_mm refuses. The weights' gradients are per expert and
// block; an expert given no rows gets a zero gradient.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace stratum::nn::moe {

at::Tensor grouped_linear(const at::Tensor& x, const std::vector<int64_t>& counts,
                          const std::vector<std::vector<at::Tensor>>& blocks);

// Which implementation grouped_linear takes for these operands: "grouped"
// (one _grouped_mm) or "loop" (one GEMM per expert); for logs and benchmarks.
const char* grouped_linear_path(const at::Tensor& x, const std::vector<int64_t>& counts,
                                const std::vector<std::vector<at::Tensor>>& blocks);

// The loop of per-expert GEMMs, whatever the device, values only (no
// autograd): what the grouped GEMM is measured against (bench/) and checked
// against (tests/).
at::Tensor grouped_linear_loop(const at::Tensor& x, const std::vector<int64_t>& counts,
                               const std::vector<std::vector<at::Tensor>>& blocks);

}  // namespace stratum::nn::moe
