#include "stratum/nn/moe/grouped_linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "stratum/core/error.h"
#include "stratum/core/log.h"
#include "stratum/nn/linear.h"

namespace stratum::nn::moe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `ts` as one tensor [n, rows, cols] when they lie evenly spaced in one
// buffer (each [rows, cols] contiguous), else an undefined tensor.
at::Tensor evenly_spaced(const std::vector<at::Tensor>& ts) {
  const at::Tensor& first = ts.front();
  if (first.dim() != 2 || !first.is_contiguous()) return {};
  const int64_t step = ts.size() > 1 ? ts[1].storage_offset() - first.storage_offset() : first.numel();
  if (step < first.numel()) return {};
  for (size_t i = 0; i < ts.size(); ++i) {
    const at::Tensor& t = ts[i];
    if (!t.is_contiguous() || t.sizes() != first.sizes() || t.scalar_type() != first.scalar_type() ||
        t.device() != first.device() || !t.storage().is_alias_of(first.storage()) ||
        t.storage_offset() != first.storage_offset() + static_cast<int64_t>(i) * step)
      return {};
  }
  return first.as_strided({static_cast<int64_t>(ts.size()), first.size(0), first.size(1)},
                          {step, first.size(1), 1}, first.storage_offset());
}

// Expert e's blocks as one [Σ out_j, in] matrix (a view when adjacent).
at::Tensor expert_weight(const std::vector<std::vector<at::Tensor>>& blocks, size_t e) {
  if (blocks.size() == 1) return blocks[0][e];
  std::vector<at::Tensor> parts;
  for (const auto& b : blocks) parts.push_back(b[e]);
  // Adjacent blocks of one expert: evenly spaced by a block's size, when the blocks share a shape.
  bool same_shape = true;
  for (const auto& p : parts) same_shape = same_shape && p.sizes() == parts[0].sizes();
  if (same_shape) {
    const at::Tensor v = evenly_spaced(parts);
    if (v.defined() && v.stride(0) == parts[0].numel()) return v.reshape({-1, parts[0].size(1)});
  }
  return at::cat(parts, 0);
}

// Every expert's weight stacked [E, Σ out_j, in] (a view when evenly spaced).
at::Tensor stacked_weights(const std::vector<std::vector<at::Tensor>>& blocks) {
  const size_t experts = blocks[0].size();
  std::vector<at::Tensor> per_expert;
  for (size_t e = 0; e < experts; ++e) per_expert.push_back(expert_weight(blocks, e));
  const at::Tensor v = evenly_spaced(per_expert);
  return v.defined() ? v : at::stack(per_expert, 0);
}

// Each pass's grouped GEMM (the forward's, the input gradient's, the weights'
// gradient's): one ATen refuses falls back to the loop alone, the others stay.
enum Pass { kForward = 0, kInputGrad = 1, kWeightGrad = 2 };
std::atomic<bool> g_grouped_refused[3] = {false, false, false};
const char* const kPassName[3] = {"forward", "input gradient", "weight gradient"};

// STRATUM_MOE_GROUPED_GEMM: unset, each layer's path by the experts' sizes
// (below); 0, the loop on the GPU too; 1, the grouped GEMM whatever the sizes
// (switches for side-by-side timing, read once: the same math).
enum class Choice { by_size, loop, grouped };
Choice gemm_choice() {
  static const Choice choice = [] {
    const char* v = std::getenv("STRATUM_MOE_GROUPED_GEMM");
    if (v == nullptr) return Choice::by_size;
    const std::string s(v);
    if (s == "0") return Choice::loop;
    if (s == "1") return Choice::grouped;
    throw Error("STRATUM_MOE_GROUPED_GEMM must be 0 (a loop of per-expert GEMMs) or 1 (the grouped GEMM), got '" +
                s + "'; unset, the experts' sizes choose");
  }();
  return choice;
}

// Measured on the H200 (bench_moe_gemm, forward and backward, bf16): at
// Mixtral's shape (8 experts of 4096 x 14336, about 2,048 rows each) a loop
// of per-expert GEMMs runs at 645 TFLOP/s against the grouped GEMM's 598; at
// Qwen3-30B-A3B's (128 experts of 2048 x 768, about 512 rows each) the
// grouped GEMM runs at 313 against the loop's 80. An expert whose product
// fills the GPU alone gains nothing from grouping: the loop runs where the
// mean expert's product is at least kLoopFlops (Mixtral's: 240 and 481
// GFLOP; Qwen3's: 1.6 and 3.2).
constexpr double kLoopFlops = 50e9;

bool grouped_available(const at::Tensor& x, Pass pass) {
  return x.is_cuda() && x.scalar_type() == at::kBFloat16 && gemm_choice() != Choice::loop &&
         !g_grouped_refused[pass].load();
}

// Whether these operands take the grouped GEMM (before any refusal).
bool grouped_by_size(const at::Tensor& x, size_t experts, int64_t out) {
  if (gemm_choice() == Choice::grouped) return true;
  const double mean_rows = static_cast<double>(x.size(0)) / static_cast<double>(experts);
  return 2.0 * mean_rows * static_cast<double>(out) * static_cast<double>(x.size(1)) < kLoopFlops;
}

int64_t out_width(const std::vector<std::vector<at::Tensor>>& blocks) {
  int64_t out = 0;
  for (const auto& b : blocks) out += b[0].size(0);
  return out;
}

at::Tensor offsets_of(const std::vector<int64_t>& counts, c10::Device device) {
  std::vector<int32_t> ends(counts.size());
  int64_t sum = 0;
  for (size_t e = 0; e < counts.size(); ++e) ends[e] = static_cast<int32_t>(sum += counts[e]);
  return at::tensor(at::ArrayRef<int32_t>(ends), at::TensorOptions().dtype(at::kInt)).to(device, /*non_blocking=*/true);
}

// Runs `grouped` for `pass`; when ATen refuses (shapes or strides its kernel
// does not take), says so once and returns an undefined tensor: that pass's
// loop serves from then on.
template <class F>
at::Tensor try_grouped(Pass pass, F&& grouped) {
  try {
    return grouped();
  } catch (const std::exception& e) {
    if (!g_grouped_refused[pass].exchange(true))
      log::warn(std::string("MoE experts: ATen's grouped GEMM refused the ") + kPassName[pass] +
                "'s operands; a loop of per-expert GEMMs runs it instead: " + e.what());
    return {};
  }
}

std::vector<std::vector<at::Tensor>> unflatten(at::TensorList flat, size_t blocks) {
  const size_t experts = flat.size() / blocks;
  std::vector<std::vector<at::Tensor>> out(blocks);
  for (size_t j = 0; j < blocks; ++j) out[j].assign(flat.begin() + j * experts, flat.begin() + (j + 1) * experts);
  return out;
}

at::Tensor loop_forward(const at::Tensor& x, const std::vector<int64_t>& counts,
                        const std::vector<std::vector<at::Tensor>>& blocks) {
  at::Tensor y = at::empty({x.size(0), out_width(blocks)}, x.options());
  int64_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] > 0) {
      at::Tensor rows = y.narrow(0, row, counts[e]);
      at::mm_out(rows, x.narrow(0, row, counts[e]), expert_weight(blocks, e).t());
    }
    row += counts[e];
  }
  return y;
}

struct GroupedLinear : torch::autograd::Function<GroupedLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList flat, std::vector<int64_t> counts,
                            int64_t nblocks) {
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), flat.begin(), flat.end());
    ctx->save_for_backward(saved);  // the weight parameters themselves (see nn/linear.h)
    ctx->saved_data["counts"] = counts;
    ctx->saved_data["blocks"] = nblocks;
    const auto blocks = unflatten(flat, static_cast<size_t>(nblocks));
    // Backward takes the forward's choice: the same sizes.
    const bool grouped = grouped_by_size(x, counts.size(), out_width(blocks));
    ctx->saved_data["grouped"] = grouped;
    if (grouped && grouped_available(x, kForward)) {
      const at::Tensor w = stacked_weights(blocks);
      at::Tensor y =
          try_grouped(kForward, [&] { return at::_grouped_mm(x, w.transpose(1, 2), offsets_of(counts, x.device())); });
      if (y.defined()) return y;
    }
    return loop_forward(x, counts, blocks);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const auto blocks =
        unflatten(at::TensorList(saved).slice(1), static_cast<size_t>(ctx->saved_data["blocks"].toInt()));
    const at::Tensor dy = grads[0].contiguous();
    variable_list out(saved.size() + 2);
    bool any_weight = false;
    for (size_t i = 1; i < saved.size(); ++i) any_weight = any_weight || ctx->needs_input_grad(i);
    const bool grouped = ctx->saved_data["grouped"].toBool();
    const bool grouped_dx = grouped && ctx->needs_input_grad(0) && grouped_available(x, kInputGrad);
    const bool grouped_dw = grouped && any_weight && grouped_available(x, kWeightGrad);
    at::Tensor w, offs, dw;
    if (grouped_dx || grouped_dw) {
      w = stacked_weights(blocks);
      offs = offsets_of(counts, x.device());
    }
    if (grouped_dx) out[0] = try_grouped(kInputGrad, [&] { return at::_grouped_mm(dy, w, offs); });
    if (grouped_dw) dw = try_grouped(kWeightGrad, [&] { return at::_grouped_mm(dy.t(), x, offs); });  // [E, Σ out, in]
    // An expert given no rows has a zero gradient, whatever the kernel leaves in its group.
    if (dw.defined())
      for (size_t e = 0; e < counts.size(); ++e)
        if (counts[e] == 0) dw[static_cast<int64_t>(e)].zero_();
    const bool loop_dx = ctx->needs_input_grad(0) && !out[0].defined();
    if (loop_dx) out[0] = at::empty_like(x);
    int64_t row = 0;
    for (size_t e = 0; e < counts.size(); ++e) {
      const int64_t n = counts[e];
      const at::Tensor dy_e = dy.narrow(0, row, n), x_e = x.narrow(0, row, n);
      if (loop_dx && n > 0) {
        at::Tensor dx_e = out[0].narrow(0, row, n);
        at::mm_out(dx_e, dy_e, expert_weight(blocks, e));
      }
      int64_t col = 0;
      for (size_t j = 0; j < blocks.size(); ++j) {
        const at::Tensor& wj = blocks[j][e];
        const size_t i = 1 + j * counts.size() + e;
        if (ctx->needs_input_grad(i))
          out[i] = dw.defined() ? dw[static_cast<int64_t>(e)].narrow(0, col, wj.size(0))
                                : weight_grad(wj, dy_e.narrow(1, col, wj.size(0)), x_e);
        col += wj.size(0);
      }
      row += n;
    }
    return out;
  }
};

void check_operands(const at::Tensor& x, const std::vector<int64_t>& counts,
                    const std::vector<std::vector<at::Tensor>>& blocks) {
  const auto fail = [](const std::string& why) { throw Error("grouped_linear: " + why); };
  if (!x.defined() || x.dim() != 2) fail("x must be [rows, in]");
  if (blocks.empty() || blocks[0].empty()) fail("no expert weights");
  if (blocks[0].size() != counts.size())
    fail(std::to_string(counts.size()) + " row counts for " + std::to_string(blocks[0].size()) + " experts");
  int64_t rows = 0;
  for (int64_t n : counts) {
    if (n < 0) fail("a negative row count");
    rows += n;
  }
  if (rows != x.size(0)) fail("row counts sum to " + std::to_string(rows) + ", x has " + std::to_string(x.size(0)));
  for (const auto& b : blocks) {
    if (b.size() != counts.size()) fail("every block needs one weight an expert");
    for (const auto& w : b)
      if (!w.defined() || w.dim() != 2 || w.size(1) != x.size(1) || w.size(0) != b[0].size(0))
        fail("a block's weights must all be [out, " + std::to_string(x.size(1)) + "], got " +
             (w.defined() ? c10::str(w.sizes()) : std::string("undefined")));
  }
}

}  // namespace

at::Tensor grouped_linear(const at::Tensor& x, const std::vector<int64_t>& counts,
                          const std::vector<std::vector<at::Tensor>>& blocks) {
  check_operands(x, counts, blocks);
  std::vector<at::Tensor> flat;
  for (const auto& b : blocks) flat.insert(flat.end(), b.begin(), b.end());
  return GroupedLinear::apply(x, at::TensorList(flat), counts, static_cast<int64_t>(blocks.size()));
}

const char* grouped_linear_path(const at::Tensor& x, const std::vector<int64_t>& counts,
                                const std::vector<std::vector<at::Tensor>>& blocks) {
  check_operands(x, counts, blocks);
  return grouped_available(x, kForward) && grouped_by_size(x, counts.size(), out_width(blocks)) ? "grouped" : "loop";
}

at::Tensor grouped_linear_loop(const at::Tensor& x, const std::vector<int64_t>& counts,
                               const std::vector<std::vector<at::Tensor>>& blocks) {
  check_operands(x, counts, blocks);
  c10::AutoGradMode values_only(false);
  return loop_forward(x, counts, blocks);
}

}  // namespace stratum::nn::moe
