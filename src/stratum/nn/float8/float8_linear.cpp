#include "stratum/nn/float8/float8_linear.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "stratum/core/error.h"
#include "stratum/nn/float8/scaled_gemm.h"
#include "stratum/nn/linear.h"

namespace stratum::nn::float8 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs of a cast operand, kept in saved_data (IValues): not
// autograd-saved variables, whose version checks a weight copy replaced
// after the step would trip, and no pointer to the projection.
void save(AutogradContext* ctx, const std::string& key, const Float8Tensor& t) {
  ctx->saved_data[key] = t.data;
  ctx->saved_data[key + ".scale_inv"] = t.scale_inv;
}

Float8Tensor load(AutogradContext* ctx, const std::string& key) {
  return {ctx->saved_data[key].toTensor(), ctx->saved_data[key + ".scale_inv"].toTensor(), at::Tensor()};
}

// The projection's amax reduction over its tensor-parallel group, kept by
// the backward node (a capsule: it owns a copy of the function).
struct SavedReducer : torch::CustomClassHolder {
  explicit SavedReducer(AmaxReducer f) : fn(std::move(f)) {}
  AmaxReducer fn;
};

// The slot ZeRO-3 gathers the projection's W into, kept by the backward node.
struct SavedSlot : torch::CustomClassHolder {
  explicit SavedSlot(std::shared_ptr<GatheredWeight> s) : slot(std::move(s)) {}
  std::shared_ptr<GatheredWeight> slot;
};

// W gathered in FP8, read again in backward (its layer gathered again by
// then): Wᵀ is its bytes transposed, under the same tensorwise scale.
std::optional<Float8Tensor> gathered_transposed(AutogradContext* ctx) {
  if (!ctx->saved_data.count("slot")) return std::nullopt;
  const auto* saved = static_cast<const SavedSlot*>(ctx->saved_data["slot"].toCapsule().get());
  const Float8Tensor& w = saved->slot->w;
  if (!w.data.defined())
    throw Error("fp8 linear " + ctx->saved_data["layer"].toStringRef() +
                ": its weight, gathered in FP8 for the forward, is not gathered again for the backward");
  // Transposed as bytes: every backend copies those.
  return Float8Tensor{w.data.view(at::kByte).t().contiguous().view(w.data.scalar_type()), w.scale_inv, w.amax};
}

// scaled_gemm with the layer and the product named in its errors (a shape the GPU refuses).
at::Tensor layer_gemm(const std::string& layer, const char* product, const Float8Tensor& a, const Float8Tensor& b,
                      at::ScalarType out, const at::Tensor& bias = at::Tensor(), bool fast_accum = false) {
  try {
    return scaled_gemm(a, b, out, bias, fast_accum);
  } catch (const Error& e) {
    throw Error("fp8 linear " + layer + ", " + product + ": " + e.what());
  }
}

// dest = dyᵀ x (accumulate: dest += it) in dest's dtype (fp32: ZeRO's flat
// gradient or staging buffer, the sum not rounded to bf16 first), without
// fast accumulation like the other gradient GEMM. _scaled_mm writes dest
// itself; an accumulated product is made in dest's dtype and added after
// (_scaled_mm has no C to add to).
// false where ATen refuses dest's dtype (rowwise scales into fp32 need
// cuBLAS >= 12.9 on Hopper), from then on for those scales: the caller's
// product in the weights' dtype is used, which also names a shape the GPU refuses.
bool dw_into(const std::string& layer, at::Tensor dest, const Float8Tensor& dy_t, const Float8Tensor& x_t,
             bool accumulate) {
  static std::atomic<bool> refused[3] = {false, false, false};  // by the scales' rank: tensor, row, block
  const int64_t scales = std::min<int64_t>(dy_t.scale_inv.dim(), 2);
  if (refused[scales].load()) return false;
  try {
    if (!accumulate) {
      try {
        scaled_gemm_into(dest, dy_t, x_t);
      } catch (const Error& e) {
        throw Error("fp8 linear " + layer + ", dW = dyᵀ x: " + e.what());
      }
    } else {
      dest.add_(layer_gemm(layer, "dW = dyᵀ x", dy_t, x_t, dest.scalar_type()));
    }
  } catch (const c10::OutOfMemoryError&) {
    throw;  // not a refusal of the dtype
  } catch (const c10::Error&) {
    refused[scales].store(true);
    return false;
  }
  return true;
}

struct Float8Linear : torch::autograd::Function<Float8Linear> {
  // bias: [N] or empty ([0]): no bias. grad_mode: whether the caller records
  // gradients (autograd turns grad mode off inside forward); off (evaluation),
  // no transposed copy of x is made. x_amax: x's known amax, or empty ([0]).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights, const at::Tensor& bias,
                            Float8Projection* projection, bool grad_mode, const at::Tensor& x_amax) {
    const int64_t k = x.size(-1);
    const std::vector<at::Tensor> ws(weights.begin(), weights.end());
    bool weights_need_grad = false;
    for (const at::Tensor& w : ws) weights_need_grad = weights_need_grad || (grad_mode && w.requires_grad());
    const Float8Pair w8 = projection->weight(ws);
    const Recipe& recipe = projection->recipe();
    const SplitAxis axis = projection->split_axis();
    const AmaxReducer& reducer = projection->amax_reducer();
    const at::Tensor x2 = x.reshape({-1, k}).contiguous();
    const Float8Pair x8 = cast_shard(x2, recipe.forward(), /*with_transposed=*/weights_need_grad,
                                     split_dim(axis, Operand::input), reducer,
                                     x_amax.numel() > 0 ? x_amax : at::Tensor());
    projection->record_amax(x8.rows.amax, Operand::input);
    const bool with_bias = bias.numel() > 0;
    // Fast accumulation in the forward GEMM only, as torchao: the gradients' sums keep full precision.
    const at::Tensor y2 = layer_gemm(projection->name(), "y = x Wᵀ", x8.rows, w8.rows, x.scalar_type(),
                                     with_bias ? bias : at::Tensor(), /*fast_accum=*/true);
    if (weights_need_grad) {
      save(ctx, "x_t", x8.transposed);
      // The parameters, for their gradient sinks (found by identity); not autograd-saved: no version check.
      ctx->saved_data["weights"] = c10::List<at::Tensor>(ws);
    }
    if (w8.transposed.data.defined()) {
      save(ctx, "w_t", w8.transposed);
    } else if (projection->gathered() && projection->gathered()->w.data.defined()) {
      ctx->saved_data["slot"] = at::IValue::make_capsule(c10::make_intrusive<SavedSlot>(projection->gathered()));
    } else {
      // ZeRO-3 (the cache holds no weights): Wᵀ is cast in backward from the
      // weights, gathered again by then (the parameters themselves, whose
      // data ZeRO-3 rebinds; not autograd-saved: no version check).
      ctx->saved_data["w"] = c10::List<at::Tensor>(ws);
    }
    ctx->saved_data["split_axis"] = static_cast<int64_t>(axis);
    if (reducer) ctx->saved_data["reducer"] = at::IValue::make_capsule(c10::make_intrusive<SavedReducer>(reducer));
    ctx->saved_data["forward_format"] = static_cast<int64_t>(recipe.forward_format);
    ctx->saved_data["flags"] = projection->nonfinite_flags();
    ctx->saved_data["layer"] = projection->name();
    ctx->saved_data["grad_format"] = static_cast<int64_t>(recipe.grad_format);
    ctx->saved_data["scaling"] = static_cast<int64_t>(recipe.scaling);
    ctx->saved_data["weight_scaling"] = static_cast<int64_t>(recipe.weight_scaling);
    ctx->saved_data["power_of_2"] = recipe.power_of_2;
    ctx->saved_data["x_shape"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    std::vector<int64_t> rows;
    for (const at::Tensor& w : ws) rows.push_back(w.size(0));
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(ws.front().scalar_type());
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = y2.size(1);
    return y2.view(sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> rows = ctx->saved_data["rows"].toIntVector();
    const size_t n_weights = rows.size();
    variable_list out(n_weights + 5);  // x, each weight, bias; undefined for projection, grad_mode and x_amax
    const at::Tensor& grad = grads[0];
    const at::Tensor g2 = grad.reshape({-1, grad.size(-1)}).contiguous();
    bool any_weight = false;
    for (size_t i = 0; i < n_weights; ++i) any_weight = any_weight || ctx->needs_input_grad(1 + i);
    const CastSpec spec{static_cast<Format>(ctx->saved_data["grad_format"].toInt()),
                        static_cast<Scaling>(ctx->saved_data["scaling"].toInt()),
                        ctx->saved_data["power_of_2"].toBool()};
    const auto axis = static_cast<SplitAxis>(ctx->saved_data["split_axis"].toInt());
    AmaxReducer reducer;
    if (ctx->saved_data.count("reducer"))
      reducer = static_cast<const SavedReducer*>(ctx->saved_data["reducer"].toCapsule().get())->fn;
    const Float8Pair g8 =
        cast_shard(g2, spec, /*with_transposed=*/any_weight, split_dim(axis, Operand::grad_output), reducer);
    record_amax(g8.rows.amax, Operand::grad_output, ctx->saved_data["flags"].toTensor(),
                ctx->saved_data["layer"].toStringRef());
    if (ctx->needs_input_grad(0)) {
      const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
      Float8Tensor w_t;
      if (ctx->saved_data.count("w_t")) {
        w_t = load(ctx, "w_t");
      } else if (auto gathered = gathered_transposed(ctx)) {
        w_t = std::move(*gathered);
      } else {
        // Wᵀ's rows are W's columns: its split dimension is W's other one.
        c10::AutoGradMode no_grad(false);
        const c10::List<at::Tensor> ws = ctx->saved_data["w"].toTensorList();
        const at::Tensor stacked = ws.size() == 1 ? ws.get(0) : at::cat(ws.vec(), 0);
        const CastSpec w_spec{static_cast<Format>(ctx->saved_data["forward_format"].toInt()),
                              static_cast<Scaling>(ctx->saved_data["weight_scaling"].toInt()),
                              spec.power_of_2};
        const int w_split = split_dim(axis, Operand::weight);
        w_t = cast_shard(stacked.t().contiguous(), w_spec, /*with_transposed=*/false, w_split < 0 ? -1 : 1 - w_split,
                         reducer)
                  .rows;
      }
      out[0] = layer_gemm(ctx->saved_data["layer"].toStringRef(), "dx = dy W", g8.rows, w_t, x_dtype)
                   .view(ctx->saved_data["x_shape"].toIntVector());
    }
    if (any_weight) {
      const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
      const std::string layer = ctx->saved_data["layer"].toStringRef();
      // The FP8 operands with their scales: all a deferred dW keeps until W.
      const Float8Tensor dy_t{g8.transposed.data, g8.transposed.scale_inv, at::Tensor()};
      const Float8Tensor x_t = load(ctx, "x_t");
      const WeightGradGemm gemm{
          [layer, dy_t, x_t](at::Tensor dest, bool accumulate) { return dw_into(layer, dest, dy_t, x_t, accumulate); },
          [layer, dy_t, x_t, w_dtype] { return layer_gemm(layer, "dW = dyᵀ x", dy_t, x_t, w_dtype); }};
      bool every_weight = true;
      for (size_t i = 0; i < n_weights; ++i) every_weight = every_weight && ctx->needs_input_grad(1 + i);
      // Into the weights' sinks where ZeRO registered them (nn/linear.h), else to autograd.
      const std::vector<at::Tensor> written =
          every_weight ? write_weight_grads(ctx->saved_data["weights"].toTensorList().vec(), gemm)
                       : std::vector<at::Tensor>{};
      if (!written.empty()) {
        for (size_t i = 0; i < n_weights; ++i) out[1 + i] = written[i];
      } else {
        const at::Tensor gw = gemm.product();
        int64_t row = 0;
        for (size_t i = 0; i < n_weights; ++i) {
          if (ctx->needs_input_grad(1 + i)) out[1 + i] = n_weights == 1 ? gw : gw.narrow(0, row, rows[i]);
          row += rows[i];
        }
      }
    }
    if (ctx->needs_input_grad(1 + n_weights)) out[1 + n_weights] = bias_grad(g2);
    return out;
  }
};

}  // namespace

at::Tensor float8_linear(const at::Tensor& x, const std::vector<at::Tensor>& weights, const at::Tensor& bias,
                         Float8Projection& projection, const at::Tensor& x_amax) {
  if (!x.defined() || x.dim() < 1 || weights.empty())
    throw Error("fp8 linear " + projection.name() + ": need x [..., K] and at least one weight");
  int64_t n = 0;
  for (const at::Tensor& w : weights) {
    if (!w.defined() || w.dim() != 2 || w.size(1) != x.size(-1))
      throw Error("fp8 linear " + projection.name() + ": weight " +
                  (w.defined() ? c10::str(w.sizes()) : std::string("undefined")) + " does not take x " +
                  c10::str(x.sizes()));
    n += w.size(0);
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != n))
    throw Error("fp8 linear " + projection.name() + ": bias " + c10::str(bias.sizes()) + " for " +
                std::to_string(n) + " outputs");
  // The forward contracts over K and dx over N, each with W in 128x128
  // blocks: named here, at the first forward, rather than by the GEMM.
  const int64_t k = x.size(-1);
  if (x.is_cuda() && is_blockwise(projection.recipe().scaling) && (n % kBlockwiseGpuK != 0 || k % kBlockwiseGpuK != 0))
    throw Error("fp8 linear " + projection.name() + ": recipe \"blockwise\" on a GPU needs the weight's widths to "
                "be multiples of " + std::to_string(kBlockwiseGpuK) + ", and this rank's is [" + std::to_string(n) +
                ", " + std::to_string(k) + "] (cuBLASLt reads 128x128 weight scales four blocks at a time along "
                "the forward's contraction, the input width, and dx's, the output width); name the layer in "
                "fp8.exclude, or use \"tensorwise\" or \"rowwise\"");
  return Float8Linear::apply(x, at::TensorList(weights), bias.defined() ? bias : at::empty({0}, x.options()),
                             &projection, c10::GradMode::is_enabled(),
                             x_amax.defined() ? x_amax : at::empty({0}, x.options().dtype(at::kFloat)));
}

}  // namespace stratum::nn::float8
