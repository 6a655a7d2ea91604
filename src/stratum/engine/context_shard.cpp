#include "stratum/engine/context_shard.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"
#include "stratum/engine/engine.h"

namespace stratum::engine_detail {

nn::cp::ContextParallel context_parallel_of(const Config& config, const distributed::ProcessGrid& grid) {
  nn::cp::ContextParallel cp;
  if (grid.cp() == 1) return cp;
  const std::string& m = config.context_parallel.method;
  cp.method = m == "ulysses" ? nn::cp::Method::ulysses : m == "hybrid" ? nn::cp::Method::hybrid : nn::cp::Method::ring;
  cp.group = grid.cp_group();
  cp.ulysses = grid.cp_ulysses_group();
  cp.ring = grid.cp_ring_group();
  return cp;
}

MicroBatch context_shard(const MicroBatch& whole, const nn::cp::ContextParallel& cp, int64_t multiple, int index,
                         const char* what, c10::Device device) {
  const std::string where = std::string(what) + ": micro-batch " + std::to_string(index) + ": ";
  const at::Tensor& shaped = whole.inputs.defined()   ? whole.inputs
                             : whole.labels.defined() ? whole.labels
                                                      : whole.segment_ids;
  if (!shaped.defined() || shaped.dim() != 2)
    throw Error(where + "under context parallelism every stage's micro-batch gives its [batch, sequence] inputs, "
                        "labels or segment ids (the rank keeps its part of the sequence)");
  const int64_t rows = shaped.size(0), length = shaped.size(1);
  const nn::cp::ContextSplit split = cp.split();
  if (const std::string problem = nn::cp::split_problem(length, split); !problem.empty())
    throw Error(where + problem + " (context_parallel.size " + std::to_string(cp.size()) + ")");
  const int64_t part = length / cp.size();
  if (part % multiple != 0)
    throw Error(where + "each of the " + std::to_string(cp.size()) + " context-parallel ranks holds " +
                std::to_string(part) + " of the " + std::to_string(length) +
                " tokens, which sequence parallelism does not split over " + std::to_string(multiple) +
                " tensor-parallel ranks; use a length that is a multiple of " +
                std::to_string(cp.size() * multiple * (split.ring() > 1 ? 2 : 1)));
  // The whole rows' layout, checked and on the device (attention reads it under packing).
  std::optional<nn::SequenceLayout> whole_layout = micro_batch_layout(whole, index, what, device);

  const std::vector<int64_t> mine = nn::cp::rank_positions(length, split, cp.rank());
  const at::Tensor at_host = at::tensor(mine, at::TensorOptions().dtype(at::kLong));
  const auto cut = [&](const at::Tensor& t) {
    return t.defined() ? t.index_select(1, at_host.to(t.device())) : at::Tensor();
  };
  MicroBatch local;
  local.inputs = cut(whole.inputs);
  local.labels = cut(whole.labels);
  if (whole_layout) {
    local.segment_ids = cut(whole.segment_ids);
    local.position_ids = cut(whole.position_ids);
  } else {
    local.segment_ids = at::zeros({rows, part}, at::TensorOptions().dtype(at::kInt));
    local.position_ids = at_host.unsqueeze(0).expand({rows, part}).contiguous();
  }
  local.loss_tokens = whole.loss_tokens >= 0 && local.labels.defined() ? local.labels.ne(-100).sum().item<int64_t>()
                                                                        : whole.loss_tokens;
  auto shard = std::make_shared<nn::cp::ContextShard>();
  shard->cp = cp;
  shard->whole_length = length;
  shard->whole = std::move(whole_layout);
  local.context = std::move(shard);
  return local;
}

std::vector<std::string> context_parallel_problems(const Config& config, int64_t heads, int64_t kv_heads,
                                                   int64_t seq_len, double attention_dropout) {
  std::vector<std::string> out;
  const config::ContextParallelConfig& c = config.context_parallel;
  if (c.size <= 1) return out;
  const int64_t t = config.tensor_parallel.size, u = c.ulysses_size;
  const int64_t local_heads = heads / t, local_kv = kv_heads % t == 0 ? kv_heads / t : 1;
  if (u > 1 && (local_heads % u != 0 || local_kv % u != 0))
    out.push_back("context_parallel." + std::string(c.method == "hybrid" ? "ulysses_size" : "size") + ": Ulysses over " +
                  std::to_string(u) + " ranks splits the heads, but the model has " + std::to_string(heads) +
                  " query and " + std::to_string(kv_heads) + " key/value heads" +
                  (t > 1 ? " (" + std::to_string(local_heads) + " and " + std::to_string(local_kv) + " per " +
                               std::to_string(t) + "-way tensor-parallel rank)"
                         : std::string()) +
                  "; use a Ulysses size that divides both, or method \"ring\" (any heads)");
  const nn::cp::ContextSplit split{c.size, u};
  if (const std::string problem = nn::cp::split_problem(seq_len, split); !problem.empty())
    out.push_back("context_parallel.size: " + problem + " (the model's max_seq_len is " + std::to_string(seq_len) + ")");
  else if (config.tensor_parallel.sequence_parallel && (seq_len / c.size) % t != 0)
    out.push_back("context_parallel.size: each rank's " + std::to_string(seq_len / c.size) +
                  " tokens do not split over the " + std::to_string(t) +
                  " tensor-parallel ranks of sequence parallelism; use a max_seq_len that is a multiple of " +
                  std::to_string(c.size * t * (split.ring() > 1 ? 2 : 1)));
  if (split.ring() > 1 && attention_dropout > 0)
    out.push_back("context_parallel.method: \"" + c.method + "\" passes key/value blocks around a ring, which has no "
                  "attention dropout, but the model's is " + std::to_string(attention_dropout) +
                  "; set it to 0 (--set attention_dropout=0) or use method \"ulysses\"");
  return out;
}

}  // namespace stratum::engine_detail
