// Context parallelism's attention: which exchange a method runs (context_parallel.h).
#include <ATen/ATen.h>

#include <string>

#include "stratum/core/error.h"
#include "stratum/nn/attention.h"
#include "stratum/nn/context_parallel/context_parallel.h"
#include "stratum/nn/context_parallel/ring_attention.h"
#include "stratum/nn/context_parallel/ulysses.h"

namespace stratum::nn::cp {

const char* method_name(Method m) {
  switch (m) {
    case Method::ulysses: return "ulysses";
    case Method::ring: return "ring";
    case Method::hybrid: return "hybrid";
  }
  return "?";
}

at::Tensor context_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                             const ContextShard& shard) {
  const ContextParallel& cp = shard.cp;
  const int64_t u = cp.ulysses_size(), r = cp.ring_size();
  if (r > 1 && dropout_p > 0)
    throw Error("context_parallel.method \"" + std::string(method_name(cp.method)) +
                "\": ring attention has no attention dropout (it is " + std::to_string(dropout_p) +
                "); set the model's attention dropout to 0 or use method \"ulysses\"");
  if (u > 1 && (q.size(1) % u != 0 || k.size(1) % u != 0))
    throw Error("context_parallel: Ulysses over " + std::to_string(u) + " ranks splits the heads, but this rank has " +
                std::to_string(q.size(1)) + " query and " + std::to_string(k.size(1)) +
                " key/value heads (after tensor parallelism); use a Ulysses size that divides both, or method \"ring\"");
  const std::vector<at::Tensor> heads = sequence_to_heads({q, k, v}, cp.ulysses);
  const at::Tensor out =
      r > 1 ? ring_attention(heads[0], heads[1], heads[2], shard)
            : causal_attention(heads[0], heads[1], heads[2], dropout_p, shard.whole ? &*shard.whole : nullptr);
  return heads_to_sequence(out, cp.ulysses);
}

}  // namespace stratum::nn::cp
