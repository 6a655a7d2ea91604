#pragma once
// LAMB written from the paper (You et al. 2019, "Large Batch Optimization for
// Deep Learning", Algorithm 2) with DeepSpeed's FusedLamb conventions (eps
// outside the square root, decoupled weight decay inside the update, the trust
// ratio clamped to [min_coeff, max_coeff] and 1 when either norm is 0): one
// parameter tensor at a time, in double. What the optimizer tests compare with.
#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>

#include "stratum/config/sections.h"

namespace stratum::test {

struct LambReference {
  std::vector<at::Tensor> p, m, v;  // double, the parameters' shapes
  int64_t step = 0;
  std::vector<double> last_ratios;
  bool hit_max = false, hit_min = false, hit_zero = false;  // which trust-ratio rules were used

  explicit LambReference(const std::vector<at::Tensor>& init) {
    for (const auto& t : init) {
      p.push_back(t.detach().to(at::kDouble).clone());
      m.push_back(at::zeros_like(p.back()));
      v.push_back(at::zeros_like(p.back()));
    }
  }

  void apply(const std::vector<at::Tensor>& grads, const config::OptimizerConfig& c, double lr, double beta1) {
    ++step;
    last_ratios.clear();
    for (size_t i = 0; i < p.size(); ++i) {
      const at::Tensor g = grads[i].to(at::kDouble);
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
      at::Tensor m_hat = m[i], v_hat = v[i];
      if (c.bias_correction) {
        m_hat = m[i] / (1 - std::pow(beta1, double(step)));
        v_hat = v[i] / (1 - std::pow(c.beta2, double(step)));
      }
      const at::Tensor u = m_hat / (v_hat.sqrt() + c.eps) + c.weight_decay * p[i];
      const double p_norm = p[i].norm().item<double>(), u_norm = u.norm().item<double>();
      double r = 1.0;
      if (p_norm > 0 && u_norm > 0) {
        r = p_norm / u_norm;
        hit_max = hit_max || r > c.max_coeff;
        hit_min = hit_min || r < c.min_coeff;
        r = std::min(std::max(r, c.min_coeff), c.max_coeff);
      } else {
        hit_zero = true;
      }
      last_ratios.push_back(r);
      p[i] = p[i] - lr * r * u;
    }
  }
};

}  // namespace stratum::test
