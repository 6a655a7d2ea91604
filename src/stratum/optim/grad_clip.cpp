#include "stratum/optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include <ATen/ops/isfinite.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

namespace stratum::optim {

// linalg_vector_norm with a dtype upcasts inside the reduction: no fp32 copy
// of an fp16 buffer, and no fp16 overflow of the squares.
at::Tensor l2_norm(const at::Tensor& g) {
  if (g.is_cpu()) return at::linalg_vector_norm(g, 2, std::nullopt, false, at::kDouble).to(at::kFloat);
  return at::linalg_vector_norm(g, 2, std::nullopt, false, at::kFloat);
}

void l2_norm_out(at::Tensor& out, const at::Tensor& g) {
  if (g.is_cpu()) out.copy_(at::linalg_vector_norm(g, 2, std::nullopt, false, at::kDouble));
  else at::linalg_vector_norm_out(out, g, 2, std::nullopt, false, at::kFloat);
}

at::Tensor squared_norm(const std::vector<at::Tensor>& grads) {
  std::vector<at::Tensor> norms;
  norms.reserve(grads.size());
  for (const at::Tensor& g : grads)
    if (g.numel() > 0) norms.push_back(l2_norm(g));
  if (norms.empty())
    return at::zeros({}, grads.empty() ? at::TensorOptions(at::kFloat) : grads.front().options().dtype(at::kFloat));
  return at::stack(norms).square().sum();
}

double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0.0 || !std::isfinite(total_norm)) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

at::Tensor clip_coefficient(const at::Tensor& total_norm, double max_norm) {
  if (max_norm <= 0.0) return at::ones({}, total_norm.options());
  const at::Tensor coef = total_norm.add(1e-6).reciprocal().mul(max_norm).clamp_max(1.0);
  return at::where(at::isfinite(total_norm), coef, at::ones_like(coef));
}

}  // namespace stratum::optim
