#include "stratum/zero/float8_unit_gather.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <limits>

#include "stratum/core/error.h"
#include "stratum/nn/float8/cast.h"

namespace stratum::zero {
namespace {

namespace f8 = nn::float8;

// The forward format of the tensorwise recipe (nn/float8/float8_projection.h).
const f8::CastSpec kWeightSpec{f8::Format::e4m3, f8::Scaling::tensorwise, false};

// A run of a rank's slice: [slice_begin, slice_begin + numel) of the slice
// is [param_begin, ...) of parameter `param`'s values.
struct Run {
  int param = 0;
  int64_t slice_begin = 0, param_begin = 0, numel = 0;
};

// The runs of `unit`'s slice on `rank` that hold parameters' values.
std::vector<Run> slice_runs(const FlatLayout& layout, int unit, int rank) {
  const BucketSpan& b = layout.buckets()[unit];
  const int64_t lo = layout.slice_offset(unit, rank), hi = lo + b.slice_numel(layout.dp_size());
  std::vector<Run> runs;
  for (int p : b.params) {
    const ParamSlot& s = layout.params()[p];
    const int64_t from = std::max(lo, s.offset), to = std::min(hi, s.offset + s.numel);
    if (from < to) runs.push_back(Run{p, from - lo, from - s.offset, to - from});
  }
  return runs;
}

// A run of values as a matrix the cast kernels tile well: rows of 1024 and a
// last short row apart (a run cuts a parameter anywhere).
template <typename Fn>
void for_each_block(const at::Tensor& run, Fn&& fn) {
  constexpr int64_t kRow = 1024;
  const int64_t n = run.numel(), whole = n / kRow * kRow;
  if (whole > 0) fn(run.narrow(0, 0, whole).view({whole / kRow, kRow}), int64_t{0});
  if (n > whole) fn(run.narrow(0, whole, n - whole).view({1, n - whole}), whole);
}

}  // namespace

Float8UnitGather::Float8UnitGather(std::vector<Float8GatherGroup> groups, const FlatLayout& layout,
                                   const std::vector<bool>& persistent, int rank)
    : groups_(std::move(groups)), layout_(layout), rank_(rank) {
  const auto& buckets = layout_.buckets();
  if (persistent.size() != buckets.size()) throw Error("ZeRO-3 FP8 gather: one persistence flag a unit expected");
  group_of_.assign(layout_.params().size(), -1);
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].params.empty() || !groups_[g].slot)
      throw Error("ZeRO-3 FP8 gather: projection " + groups_[g].name + " given no weights or no slot");
    for (int p : groups_[g].params) {
      if (p < 0 || p >= static_cast<int>(group_of_.size()) || group_of_[p] >= 0)
        throw Error("ZeRO-3 FP8 gather: projection " + groups_[g].name + " names a parameter out of range or twice");
      group_of_[p] = static_cast<int>(g);
    }
  }
  unit_groups_.resize(buckets.size());
  for (size_t u = 0; u < buckets.size(); ++u) {
    if (persistent[u]) continue;
    report_.elems += buckets[u].numel;
    std::vector<int> in_unit;
    std::string kept;
    for (int p : buckets[u].params) {
      const int g = group_of_[p];
      if (g < 0) {
        if (kept.empty()) kept = layout_.specs()[p].name;
      } else if (std::find(in_unit.begin(), in_unit.end(), g) == in_unit.end()) {
        in_unit.push_back(g);
      }
    }
    if (in_unit.empty()) continue;  // no FP8 projection's weight (an embedding): bf16
    ++report_.units;
    // A projection with weights in two units (one under the persistence
    // threshold) is cast after its gathers instead.
    for (size_t i = 0; i < in_unit.size() && kept.empty(); ++i)
      for (int p : groups_[in_unit[i]].params)
        if (layout_.params()[p].bucket != static_cast<int>(u)) kept = layout_.specs()[p].name;
    if (!kept.empty()) {
      if (report_.kept_16bit.empty()) report_.kept_16bit = kept;
      continue;
    }
    unit_groups_[u] = std::move(in_unit);
    ++report_.units_in_fp8;
    report_.elems_in_fp8 += buckets[u].numel;
  }
  scales_.resize(groups_.size());
}

void Float8UnitGather::take_scales(const at::Tensor& shard16, distributed::Communicator& dp, c10::Device device) {
  // No projection (a pipeline stage holding none): no scale, no collective,
  // on every rank of the group alike.
  if (groups_.empty()) return;
  c10::AutoGradMode no_grad(false);
  // This rank's part of each projection's amax: the largest |value| of its weights' runs in the shard.
  std::vector<std::vector<at::Tensor>> parts(groups_.size());
  for (size_t u = 0; u < unit_groups_.size(); ++u) {
    if (!unit_groups_[u]) continue;
    const int64_t shard_begin = layout_.buckets()[u].shard_offset;
    for (const Run& r : slice_runs(layout_, static_cast<int>(u), rank_)) {
      // A run at a time onto the device (a shard on the host: offload_param), ordered after the step's writes.
      const at::Tensor run = shard16.narrow(0, shard_begin + r.slice_begin, r.numel);
      parts[group_of_[r.param]].push_back(
          (run.device() == device ? run : run.to(device, /*non_blocking=*/true)).abs().amax());
    }
  }
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  std::vector<at::Tensor> local;
  for (const auto& p : parts) local.push_back(p.empty() ? at::zeros({}, f32) : at::stack(p).amax().to(at::kFloat));
  // Inf and NaN enter the max as Inf, so every rank sees them (a max over NaN
  // differs between backends); the projection names the layer at its GEMM.
  at::Tensor amax = at::nan_to_num(at::stack(local), std::numeric_limits<double>::infinity()).contiguous();
  dp.all_reduce(amax, distributed::ReduceOp::max)->wait();
  for (const Float8GatherGroup& g : groups_)
    if (g.max_over_tensor_parallel) {
      g.max_over_tensor_parallel(amax);
      break;
    }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const at::Tensor a = amax.select(0, static_cast<int64_t>(g)).clone();
    scales_[g] = Scale{a, f8::scale_from_amax(a, kWeightSpec.format, kWeightSpec.power_of_2).reciprocal()};
  }
}

at::Tensor Float8UnitGather::cast_slice(int unit, const at::Tensor& slice16) const {
  c10::AutoGradMode no_grad(false);
  const auto& groups = unit_groups_.at(unit);
  if (!groups) throw Error("ZeRO-3 FP8 gather: unit " + std::to_string(unit) + " is gathered in 16 bits");
  at::Tensor out = at::empty({slice16.numel()}, slice16.options().dtype(at::kByte));
  // The runs lie one after another from the slice's start (a unit's
  // parameters are adjacent): what follows the last is the unit's padding.
  int64_t covered = 0;
  for (const Run& r : slice_runs(layout_, unit, rank_)) {
    const Scale& s = scales_[group_of_[r.param]];
    if (!s.amax.defined()) throw Error("ZeRO-3 FP8 gather: no scales taken before the first gather");
    const at::Tensor values = slice16.narrow(0, r.slice_begin, r.numel);
    const at::Tensor dest = out.narrow(0, r.slice_begin, r.numel);
    for_each_block(values, [&](const at::Tensor& block, int64_t at) {
      f8::cast_with_amax(block, s.amax, kWeightSpec, dest.narrow(0, at, block.numel()));  // cast in place
    });
    covered = std::max(covered, r.slice_begin + r.numel);
  }
  out.narrow(0, covered, out.numel() - covered).zero_();
  return out;
}

void Float8UnitGather::bind(int unit, const at::Tensor& full8) const {
  const auto& groups = unit_groups_.at(unit);
  if (!groups) return;
  const BucketSpan& b = layout_.buckets()[unit];
  const at::ScalarType fp8 = f8::scalar_type(kWeightSpec.format);
  for (int g : *groups) {
    const Float8GatherGroup& group = groups_[g];
    // The stacked W: a view where the weights sit one after another in the
    // unit (q/k/v, gate/up as registered), else their concatenation.
    std::vector<at::Tensor> weights;
    bool adjacent = true;
    int64_t rows = 0;
    const int64_t cols = layout_.specs()[group.params.front()].shape.back();
    for (size_t i = 0; i < group.params.size(); ++i) {
      const int p = group.params[i];
      const ParamSlot& s = layout_.params()[p];
      const auto& shape = layout_.specs()[p].shape;
      if (shape.size() != 2 || shape[1] != cols)
        throw Error("ZeRO-3 FP8 gather: projection " + group.name + "'s weights are not [rows, " +
                    std::to_string(cols) + "] matrices");
      if (i > 0) {
        const ParamSlot& prev = layout_.params()[group.params[i - 1]];
        adjacent = adjacent && s.offset == prev.offset + prev.numel;
      }
      weights.push_back(full8.narrow(0, s.offset - b.offset, s.numel).view({shape[0], cols}));
      rows += shape[0];
    }
    const at::Tensor bytes =
        weights.size() == 1 ? weights.front()
        : adjacent ? full8.narrow(0, layout_.params()[group.params.front()].offset - b.offset, rows * cols)
                         .view({rows, cols})
                   : at::cat(weights, 0);
    const at::Tensor w = bytes.view(fp8);
    group.slot->w = f8::Float8Tensor{w, scales_[g].scale_inv, scales_[g].amax};
  }
}

void Float8UnitGather::unbind(int unit) const {
  const auto& groups = unit_groups_.at(unit);
  if (!groups) return;
  for (int g : *groups) groups_[g].slot->w = f8::Float8Tensor{};
}

}  // namespace stratum::zero
