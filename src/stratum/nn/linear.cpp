#include "stratum/nn/linear.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>

#include "stratum/core/error.h"
#include "stratum/nn/param_registry.h"
#include "stratum/nn/weight_grad_deferral.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/kernel_launch.h"
#endif

namespace stratum::nn {
namespace {

struct SinkEntry {
  static constexpr const char* kWhat = "linear: a weight-gradient sink";
  WeightGradSink* sink;
};
using Sinks = ParamRegistry<SinkEntry>;

WeightGradSink* sink_for(const at::Tensor& weight) {
  const std::optional<SinkEntry> entry = Sinks::instance().find(weight);
  return entry ? entry->sink : nullptr;
}

// ATen's addmm.dtype_out (a 16-bit product written as fp32), looked up by name:
// absent from older torch builds, where the fusion stays off.
const std::optional<c10::OperatorHandle>& addmm_dtype_out() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findSchema({"aten::addmm", "dtype_out"});
  return op;
}

std::atomic<DeferredWeightGrads*> g_deferral{nullptr};

// dest = a b (+ dest when `accumulate`) in dest's dtype; false where ATen
// cannot write this product into dest's dtype.
bool product_into(at::Tensor dest, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  const double beta = accumulate ? 1.0 : 0.0;  // 0: dest's old contents are ignored, NaN included
  if (dest.scalar_type() == a.scalar_type()) {
    at::addmm_out(dest, dest, a, b, beta, 1.0);
    return true;
  }
  if (!dest.is_cuda() || dest.scalar_type() != at::kFloat || !addmm_dtype_out()) return false;
  // Some torch releases want addmm.dtype_out's `self` in the operands' dtype:
  // adding to an fp32 dest is then refused (checked once; autograd's path after).
  static std::atomic<bool> fp32_self_refused{false};
  if (accumulate && fp32_self_refused.load()) return false;
  const auto call = [&](const at::Tensor& self) {
    addmm_dtype_out()
        ->typed<at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::ScalarType,
                            const at::Scalar&, const at::Scalar&, at::Tensor&)>()
        .call(self, a, b, at::kFloat, beta, 1.0, dest);
  };
  if (!accumulate) {
    call(at::empty({}, a.options()));  // beta 0: a placeholder `self`, never read
    return true;
  }
  try {
    call(dest);
  } catch (const c10::Error&) {
    fp32_self_refused.store(true);
    return false;
  }
  return true;
}

// The GEMM g2ᵀ x2 of 16-bit (or fp32) operands.
WeightGradGemm mm_gemm(const at::Tensor& g2, const at::Tensor& x2) {
  return {[g2, x2](at::Tensor dest, bool accumulate) { return product_into(dest, g2.t(), x2, accumulate); },
          [g2, x2]() { return g2.t().mm(x2); }};
}

}  // namespace

std::vector<at::Tensor> write_weight_grads(const std::vector<at::Tensor>& weights, const WeightGradGemm& gemm) {
  WeightGradSink* sink = sink_for(weights.front());
  if (!sink) return {};
  bool accumulate = false;
  at::Tensor first = sink->weight_grad_destination(weights.front(), &accumulate);
  if (!first.defined() || !first.is_contiguous()) return {};
  int64_t rows = first.size(0);
  for (size_t i = 1; i < weights.size(); ++i) {
    bool acc = false;
    const at::Tensor d = sink_for(weights[i]) == sink ? sink->weight_grad_destination(weights[i], &acc) : at::Tensor();
    const bool adjacent = d.defined() && d.is_contiguous() && d.scalar_type() == first.scalar_type() &&
                          d.size(1) == first.size(1) &&
                          d.storage().is_alias_of(first.storage()) &&
                          d.storage_offset() == first.storage_offset() + rows * first.size(1);
    if (!adjacent || acc != accumulate) return {};
    rows += d.size(0);
  }
  const at::Tensor block = first.as_strided({rows, first.size(1)}, {first.size(1), 1}, first.storage_offset());
  if (DeferredWeightGrads* queue = g_deferral.load()) {
    // W later: the same product into the same block, from the operands as
    // they are now; where it cannot be written in the block's dtype, the
    // product in the gradient's own dtype is widened into it.
    queue->add([block, gemm, accumulate]() {
      if (gemm.into(block, accumulate)) return;
      const at::Tensor product = gemm.product();
      if (accumulate) block.add_(product);
      else block.copy_(product);
    });
  } else if (!gemm.into(block, accumulate)) {
    return {};
  }
  std::vector<at::Tensor> stand_ins;
  for (const auto& w : weights) {
    sink->weight_grad_written(w);
    stand_ins.push_back(at::empty_like(w));  // allocator bookkeeping only: no kernel, never read
  }
  return stand_ins;
}

void DeferredWeightGrads::run() {
  std::vector<std::function<void()>> gemms = std::move(gemms_);
  gemms_.clear();
  // Outside autograd's backward: the saved inputs still require grad, and a
  // gradient written into ZeRO's buffer is no graph node.
  c10::AutoGradMode no_grad(false);
  for (auto& g : gemms) g();
}

DeferWeightGrads::DeferWeightGrads(DeferredWeightGrads& queue) {
  DeferredWeightGrads* expected = nullptr;
  if (!g_deferral.compare_exchange_strong(expected, &queue))
    throw Error("nn::DeferWeightGrads: a deferral scope is already open; they do not nest");
}

DeferWeightGrads::~DeferWeightGrads() { g_deferral.store(nullptr); }

at::Tensor weight_grad(const at::Tensor& weight, const at::Tensor& g2, const at::Tensor& x2) {
  const std::vector<at::Tensor> written = write_weight_grads({weight}, mm_gemm(g2, x2));
  return written.empty() ? g2.t().mm(x2) : written.front();
}

at::Tensor bias_grad(const at::Tensor& g) {
  if (g.dim() != 2) throw Error("bias_grad: g must be [rows, out], got " + c10::str(g.sizes()));
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (cuda::use_kernels({&g})) {
    c10::cuda::CUDAGuard guard(g.device());
    at::Tensor out = at::empty({g.size(1)}, g.options());
    const at::Tensor workspace = cuda::column_sum_workspace(g, g.size(0), g.size(1));
    cuda::check_launch(cuda::launch_column_sum(cuda::matrix_of(g), cuda::dtype_of(g), workspace.data_ptr<float>(),
                                               out.data_ptr(), cuda::current_stream()),
                       "fused elementwise kernel: bias gradient");
    return out;
  }
#endif
  return g.sum(0);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Gradients of y = x Wᵀ (+ b) from the saved input and the weight as it is now.
variable_list linear_backward(AutogradContext* ctx, const at::Tensor& grad, bool with_bias) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& w = saved[1];
  const at::Tensor g2 = grad.reshape({-1, grad.size(-1)});
  at::Tensor gx, gw, gb;
  if (ctx->needs_input_grad(0)) gx = grad.matmul(w);
  if (ctx->needs_input_grad(1)) gw = weight_grad(w, g2, x.reshape({-1, x.size(-1)}));
  if (with_bias && ctx->needs_input_grad(2)) gb = bias_grad(g2.contiguous());
  return with_bias ? variable_list{gx, gw, gb} : variable_list{gx, gw};
}

struct LinearBias : torch::autograd::Function<LinearBias> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    ctx->save_for_backward({x, w});
    return at::linear(x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*with_bias=*/true);
  }
};

struct LinearNoBias : torch::autograd::Function<LinearNoBias> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return at::linear(x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*with_bias=*/false);
  }
};

// y = x [W0; W1; ...]ᵀ: one GEMM for projections that read the same input
// (q/k/v, gate/up). The stacked weight is a temporary of each pass; the
// parameters themselves are saved, as in LinearNoBias.
// The weights as one [Σ rows, cols] matrix: a view when they lie one after
// another in one buffer (ZeRO's flat parameters, a gathered ZeRO-3 unit),
// else their concatenation (a copy of every weight, each call).
at::Tensor stacked_weight(at::TensorList weights) {
  const at::Tensor& first = weights[0];
  int64_t rows = 0;
  for (const at::Tensor& w : weights) {
    const bool next = w.dim() == 2 && w.is_contiguous() && w.scalar_type() == first.scalar_type() &&
                      w.size(1) == first.size(1) && w.device() == first.device() && w.storage().is_alias_of(first.storage()) &&
                      w.storage_offset() == first.storage_offset() + rows * first.size(1);
    if (!next) return at::cat(weights, 0);
    rows += w.size(0);
  }
  return first.as_strided({rows, first.size(1)}, {first.size(1), 1}, first.storage_offset());
}

struct LinearStacked : torch::autograd::Function<LinearStacked> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights) {
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    return at::linear(x, stacked_weight(weights));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const std::vector<at::Tensor> weights(saved.begin() + 1, saved.end());
    const at::Tensor& grad = grads[0];
    variable_list out(saved.size());
    if (ctx->needs_input_grad(0)) out[0] = grad.matmul(stacked_weight(weights));
    bool any_weight = false, every_weight = true;
    for (size_t i = 1; i < saved.size(); ++i) {
      any_weight = any_weight || ctx->needs_input_grad(i);
      every_weight = every_weight && ctx->needs_input_grad(i);
    }
    const at::Tensor g2 = grad.reshape({-1, grad.size(-1)}), x2 = x.reshape({-1, x.size(-1)});
    const std::vector<at::Tensor> written =
        every_weight ? write_weight_grads(weights, mm_gemm(g2, x2)) : std::vector<at::Tensor>{};
    if (!written.empty()) {
      for (size_t i = 1; i < saved.size(); ++i) out[i] = written[i - 1];
    } else if (any_weight) {
      const at::Tensor gw = g2.t().mm(x2);
      int64_t row = 0;
      for (size_t i = 1; i < saved.size(); ++i) {
        if (ctx->needs_input_grad(i)) out[i] = gw.narrow(0, row, saved[i].size(0));
        row += saved[i].size(0);
      }
    }
    return out;
  }
};

constexpr int64_t kRowAlign = 64;

int64_t padded(int64_t n) { return (n + kRowAlign - 1) / kRowAlign * kRowAlign; }

// `t` with zeros appended along `dim` up to a multiple of kRowAlign.
at::Tensor pad_with_zeros(const at::Tensor& t, int64_t dim) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[dim] = padded(t.size(dim));
  at::Tensor out = at::empty(sizes, t.options());
  out.narrow(dim, 0, t.size(dim)).copy_(t);
  out.narrow(dim, t.size(dim), sizes[dim] - t.size(dim)).zero_();
  return out;
}

struct LinearPaddedRows : torch::autograd::Function<LinearPaddedRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    const at::Tensor out = x.reshape({-1, x.size(-1)}).mm(pad_with_zeros(w, 0).t());  // [N, padded(V)]
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    return out.narrow(1, 0, w.size(0)).view(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor g2 = grads[0].reshape({-1, w.size(0)}), x2 = x.reshape({-1, x.size(-1)});
    at::Tensor gx, gw;
    const int64_t v = w.size(0), aligned = v / kRowAlign * kRowAlign;
    if (g2.stride(1) == 1 && g2.stride(0) % kRowAlign == 0 && aligned > 0) {
      // Rows already an aligned stride apart (nn::chunked_cross_entropy writes
      // its gradient in the logits' padded layout): the products read its
      // columns up to the last multiple of 64 in place; the V % 64 after, copied into a
      // zero-padded [N, 64] block, take aligned products too (an odd width
      // alone falls to cuBLAS's slow kernels). Padding the whole gradient
      // copied [N, V] twice over: 1.9 ms of gpt2-350m's 91 ms step at seq 2048.
      const int64_t tail = v - aligned;
      const at::Tensor g_tail = tail > 0 ? pad_with_zeros(g2.narrow(1, aligned, tail), 1) : at::Tensor();
      if (ctx->needs_input_grad(0)) {
        gx = g2.narrow(1, 0, aligned).mm(w.narrow(0, 0, aligned));
        if (tail > 0) gx.addmm_(g_tail, pad_with_zeros(w.narrow(0, aligned, tail), 0));
        gx = gx.view(x.sizes());
      }
      if (ctx->needs_input_grad(1)) {
        gw = at::empty(w.sizes(), w.options());
        at::Tensor head = gw.narrow(0, 0, aligned);
        at::mm_out(head, g2.narrow(1, 0, aligned).t(), x2);
        if (tail > 0) gw.narrow(0, aligned, tail).copy_(g_tail.t().mm(x2).narrow(0, 0, tail));
      }
      return {gx, gw};
    }
    // Otherwise the gradient padded with zero columns: [N, padded(V)]. The
    // weight is padded again rather than saved: ZeRO-3 releases it between
    // forward and backward, and a saved copy would pin V x C more for the step.
    const at::Tensor g = pad_with_zeros(g2, 1);
    if (ctx->needs_input_grad(0)) gx = g.mm(pad_with_zeros(w, 0)).view(x.sizes());
    if (ctx->needs_input_grad(1)) gw = g.t().mm(x2).narrow(0, 0, w.size(0));
    return {gx, gw};
  }
};

}  // namespace

void register_weight_grad_sink(const at::Tensor& weight, WeightGradSink* sink) {
  Sinks::instance().add(weight, SinkEntry{sink});
}

void unregister_weight_grad_sink(const at::Tensor& weight, const WeightGradSink* sink) {
  Sinks::instance().remove(weight, sink);
}

bool fp32_product_of_16bit_available() { return addmm_dtype_out().has_value(); }

at::Tensor linear_padded_rows(const at::Tensor& x, const at::Tensor& weight) {
  if (weight.size(0) % kRowAlign == 0) return LinearNoBias::apply(x, weight);
  return LinearPaddedRows::apply(x, weight);
}

at::Tensor linear_stacked(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  if (weights.size() == 1) return LinearNoBias::apply(x, weights.front());
  return LinearStacked::apply(x, at::TensorList(weights));
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return bias.defined() ? LinearBias::apply(x, weight, bias) : LinearNoBias::apply(x, weight);
}

}  // namespace stratum::nn
