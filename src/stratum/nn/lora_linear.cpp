#include "stratum/nn/lora_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <string>

#include "stratum/core/error.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/tensor_parallel/random.h"
#include "stratum/quant/nf4_dequantize.h"

namespace stratum::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The weight is not an autograd input: it is frozen, and saving its
// dequantization would undo what the 4 bits save.
struct Nf4Matmul : torch::autograd::Function<Nf4Matmul> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            std::shared_ptr<const quant::Nf4Tensor> weight) {
    const at::Tensor w = quant::dequantize_nf4(*weight).to(x.device(), x.scalar_type());
    ctx->saved_data["weight"] = c10::IValue::make_capsule(c10::make_intrusive<Holder>(std::move(weight)));
    return at::matmul(x, w.t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data["weight"].toCapsule();
    const auto& weight = static_cast<Holder*>(holder.get())->weight;
    const at::Tensor& g = grads[0];
    const at::Tensor w = quant::dequantize_nf4(*weight).to(g.device(), g.scalar_type());
    return {at::matmul(g, w), at::Tensor()};
  }

  struct Holder : torch::CustomClassHolder {
    explicit Holder(std::shared_ptr<const quant::Nf4Tensor> w) : weight(std::move(w)) {}
    std::shared_ptr<const quant::Nf4Tensor> weight;
  };
};

// Several NF4 weights side by side: each dequantized into its rows of one
// stacked weight, for one GEMM (and again in backward, never kept).
struct Nf4StackedMatmul : torch::autograd::Function<Nf4StackedMatmul> {
  using Weights = std::vector<std::shared_ptr<const quant::Nf4Tensor>>;

  static at::Tensor stacked(const Weights& weights, const at::Tensor& like) {
    int64_t rows = 0;
    for (const auto& w : weights) rows += w->shape[0];
    at::Tensor out = at::empty({rows, weights.front()->shape[1]}, like.options());
    int64_t row = 0;
    for (const auto& w : weights) {
      quant::dequantize_nf4_into(*w, out.narrow(0, row, w->shape[0]));
      row += w->shape[0];
    }
    return out;
  }

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Weights weights) {
    const at::Tensor w = stacked(weights, x);
    ctx->saved_data["weights"] = c10::IValue::make_capsule(c10::make_intrusive<Holder>(std::move(weights)));
    return at::matmul(x, w.t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data["weights"].toCapsule();
    const at::Tensor& g = grads[0];
    return {at::matmul(g, stacked(static_cast<Holder*>(holder.get())->weights, g)), at::Tensor()};
  }

  struct Holder : torch::CustomClassHolder {
    explicit Holder(Weights w) : weights(std::move(w)) {}
    Weights weights;
  };
};

}  // namespace

int64_t FrozenWeight::out_features() const { return nf4 ? nf4->shape.at(0) : dense.size(0); }
int64_t FrozenWeight::in_features() const { return nf4 ? nf4->shape.at(1) : dense.size(1); }

at::Tensor FrozenWeight::materialize(at::ScalarType dtype, c10::Device device) const {
  return nf4 ? quant::dequantize_nf4(*nf4).to(device, dtype) : dense.to(device, dtype);
}

double lora_scale(int64_t r, double alpha, bool rslora) {
  if (r < 1) throw Error("LoRA: rank r " + std::to_string(r) + " is below 1");
  return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

at::Tensor nf4_matmul(const at::Tensor& x, const std::shared_ptr<const quant::Nf4Tensor>& weight) {
  if (!weight || weight->shape.size() != 2)
    throw Error("nf4_matmul: the weight must be a 2-dimensional NF4 tensor");
  if (x.size(-1) != weight->shape[1])
    throw Error("nf4_matmul: input features " + std::to_string(x.size(-1)) + " but the weight takes " +
                std::to_string(weight->shape[1]));
  return Nf4Matmul::apply(x, weight);
}

at::Tensor lora_linear(const at::Tensor& x, const FrozenWeight& base, const at::Tensor& bias, const at::Tensor& lora_a,
                       const at::Tensor& lora_b, double scale, double dropout, bool training) {
  const int64_t in = base.in_features(), out = base.out_features();
  if (x.size(-1) != in)
    throw Error("LoRA linear: input features " + std::to_string(x.size(-1)) + ", the base takes " + std::to_string(in));
  if (lora_a.dim() != 2 || lora_b.dim() != 2 || lora_a.size(1) != in || lora_b.size(0) != out ||
      lora_b.size(1) != lora_a.size(0))
    throw Error("LoRA linear: A " + std::to_string(lora_a.size(0)) + "x" + std::to_string(lora_a.size(1)) + " and B " +
                std::to_string(lora_b.size(0)) + "x" + std::to_string(lora_b.size(1)) + " do not fit a " +
                std::to_string(out) + "x" + std::to_string(in) + " base (A: r x in, B: out x r)");
  if (dropout < 0 || dropout >= 1) throw Error("LoRA linear: dropout " + std::to_string(dropout) + " is not in [0, 1)");
  at::Tensor y = base.nf4 ? nf4_matmul(x, base.nf4) : at::matmul(x, base.dense.detach().t());
  if (bias.defined()) y = y + bias;
  const at::Tensor adapter_in = training && dropout > 0 ? at::dropout(x, dropout, true) : x;
  return y + at::matmul(at::matmul(adapter_in, lora_a.t()), lora_b.t()) * scale;
}

namespace {
const LinearImpl& adapter_of(const LinearImpl& layer) {
  if (!layer.has_lora()) throw Error("LoRA: layer '" + layer.name() + "' has no adapter");
  return layer;
}
// h = scale · x Aᵀ (the scale on the r columns, the cheapest place for it).
at::Tensor adapter_down(const at::Tensor& x, const LinearImpl& layer) {
  return nn::linear(x, layer.lora_A->weight) * layer.lora_scale;
}
}  // namespace

at::Tensor frozen_linear(const at::Tensor& x, const LinearImpl& layer, const at::Tensor& bias) {
  if (!layer.nf4_base) return nn::linear(x, layer.weight, bias);
  if (!layer.nf4)
    throw Error("LoRA: layer '" + layer.name() + "' holds its frozen weight in NF4 but it was never drawn or loaded");
  const at::Tensor y = nf4_matmul(x, layer.nf4);
  return bias.defined() ? y + bias : y;
}

at::Tensor frozen_linear_stacked(const at::Tensor& x, const std::vector<const LinearImpl*>& layers) {
  bool all_nf4 = true, all_dense = true;
  for (const LinearImpl* l : layers) {
    const bool nf4 = l->nf4_base && l->nf4 && l->nf4->shape.size() == 2 && l->nf4->shape[1] == x.size(-1) &&
                     l->nf4->dtype == x.scalar_type() && l->nf4->packed.device() == x.device();
    all_nf4 = all_nf4 && nf4;
    all_dense = all_dense && !l->nf4_base;
  }
  if (all_dense) {
    std::vector<at::Tensor> weights;
    for (const LinearImpl* l : layers) weights.push_back(l->weight);
    return nn::linear_stacked(x, weights);
  }
  if (all_nf4) {
    Nf4StackedMatmul::Weights weights;
    for (const LinearImpl* l : layers) weights.push_back(l->nf4);
    return Nf4StackedMatmul::apply(x, std::move(weights));
  }
  std::vector<at::Tensor> outs;
  for (const LinearImpl* l : layers) outs.push_back(frozen_linear(x, *l));
  return at::cat(outs, -1);
}

namespace {
// A layer's output features, whether its weight is held dense or in NF4.
int64_t out_features_of(const LinearImpl& l) { return l.nf4_base && l.nf4 ? l.nf4->shape[0] : l.weight.size(0); }
}  // namespace

at::Tensor add_lora_terms(const at::Tensor& y, const at::Tensor& x, const std::vector<const LinearImpl*>& layers,
                          bool training) {
  bool any = false, dropout = false, one_scale = true;
  double scale = 0.0;
  for (const LinearImpl* l : layers) {
    if (!l->has_lora()) continue;
    if (any && l->lora_scale != scale) one_scale = false;
    scale = l->lora_scale;
    any = true;
    dropout = dropout || (training && l->lora_dropout > 0);
  }
  if (!any) return y;
  if (dropout || !one_scale) {  // each term apart, in its columns
    std::vector<at::Tensor> terms;
    for (const LinearImpl* l : layers) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape.back() = out_features_of(*l);
      terms.push_back(l->has_lora() ? lora_delta(x, *l, training) : at::zeros(shape, y.options()));
    }
    return y + (terms.size() == 1 ? terms.front() : at::cat(terms, -1));
  }
  std::vector<at::Tensor> down, up;
  for (const LinearImpl* l : layers) {
    if (l->has_lora()) {
      down.push_back(l->lora_A->weight);
      up.push_back(l->lora_B->weight);
    } else {  // no columns of h: zero rows of the block-diagonal
      up.push_back(at::zeros({out_features_of(*l), 0}, y.options()));
    }
  }
  const at::Tensor h = nn::linear_stacked(x, down);
  const at::Tensor b = up.size() == 1 ? up.front() : at::block_diag(up);
  const int64_t width = y.size(-1);
  return at::addmm(y.reshape({-1, width}), h.reshape({-1, h.size(-1)}), b.t(), /*beta=*/1, /*alpha=*/scale)
      .view(y.sizes());
}

at::Tensor lora_delta(const at::Tensor& x, const LinearImpl& layer, bool training) {
  const LinearImpl& l = adapter_of(layer);
  const at::Tensor in = training && l.lora_dropout > 0 ? at::dropout(x, l.lora_dropout, true) : x;
  return nn::linear(adapter_down(in, l), l.lora_B->weight);
}

at::Tensor column_parallel_lora(const at::Tensor& x, const LinearImpl& layer, const tp::TensorParallel& tp,
                                bool training) {
  if (!tp.enabled()) return lora_delta(x, layer, training);
  const LinearImpl& l = adapter_of(layer);
  // Outside the region the input is the same on every rank (or a slice of
  // the sequence): dropout there draws as the rest of that region does.
  const at::Tensor in = training && l.lora_dropout > 0 ? tp::dropout_outside_region(x, l.lora_dropout, tp) : x;
  return nn::linear(tp::enter_region(adapter_down(in, l), tp), l.lora_B->weight);
}

at::Tensor row_parallel_lora(const at::Tensor& x, const LinearImpl& layer, const tp::TensorParallel& tp,
                             bool training) {
  if (!tp.enabled()) return lora_delta(x, layer, training);
  const LinearImpl& l = adapter_of(layer);
  auto down = [&] {
    return adapter_down(training && l.lora_dropout > 0 ? at::dropout(x, l.lora_dropout, true) : x, l);
  };
  // Inside the region each rank holds other columns: its own dropout stream.
  const at::Tensor h = training && l.lora_dropout > 0 ? tp::with_rank_stream(tp, x.device(), down) : down();
  return nn::linear(tp::leave_region(h, tp), l.lora_B->weight);
}

}  // namespace stratum::nn
