#include "stratum/nn/float8/weight_cache.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "stratum/core/error.h"
#include "stratum/nn/float8/float8_projection.h"

namespace stratum::nn::float8 {

void WeightCache::remove(const Float8Projection* p) {
  projections_.erase(std::remove(projections_.begin(), projections_.end(), p), projections_.end());
}

void WeightCache::check_finite() {
  std::vector<Float8Projection*> watched;
  std::vector<at::Tensor> flags;
  for (Float8Projection* p : projections_)
    if (p->nonfinite_flags().defined()) {
      watched.push_back(p);
      flags.push_back(p->nonfinite_flags());
    }
  if (watched.empty()) return;
  const at::Tensor host = at::stack(flags).to(at::kCPU);  // one device read for all of them
  for (size_t i = 0; i < watched.size(); ++i) {
    const std::string message = watched[i]->nonfinite_message(host[i]);
    if (message.empty()) continue;
    for (Float8Projection* p : watched) p->clear_nonfinite();
    throw Error(message);
  }
}

}  // namespace stratum::nn::float8
