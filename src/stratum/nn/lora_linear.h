#pragma once
// A linear layer with a frozen base and a trainable low-rank update (LoRA,
// Hu et al. 2021; QLoRA, Dettmers et al. 2023, with the base in NF4):
//
//   y = x·Wᵀ + bias + scale · dropout(x)·Aᵀ·Bᵀ      A: [r, in], B: [out, r]
//
// scale = alpha / r, or alpha / √r with rsLoRA (Kalajdzievski 2023), as peft
// computes it. The base gets no gradient. An NF4 base is dequantized for each
// GEMM that reads it (the forward's, and the input gradient's in backward)
// and never kept: a layer holds 4 bits a weight between them.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "stratum/nn/parameter_modules.h"
#include "stratum/nn/tensor_parallel/mappings.h"
#include "stratum/quant/nf4.h"

namespace stratum::nn {

// The frozen weight [out, in]: dense (any dtype), or NF4.
struct FrozenWeight {
  at::Tensor dense;
  std::shared_ptr<const quant::Nf4Tensor> nf4;

  int64_t out_features() const;
  int64_t in_features() const;
  // The weight in `dtype` on `device` (an NF4 one dequantized there).
  at::Tensor materialize(at::ScalarType dtype, c10::Device device) const;
};

// peft's scaling: alpha / r, or alpha / sqrt(r) with use_rslora.
double lora_scale(int64_t r, double alpha, bool rslora);

// x: [..., in]. `bias` may be undefined. Dropout (probability `dropout`, only
// when `training`) applies to the adapter's input alone, as in peft.
at::Tensor lora_linear(const at::Tensor& x, const FrozenWeight& base, const at::Tensor& bias, const at::Tensor& lora_a,
                       const at::Tensor& lora_b, double scale, double dropout, bool training);

// x·Wᵀ for a frozen NF4 W, whose backward gives x its gradient, dY·W, with W
// dequantized again rather than saved.
at::Tensor nf4_matmul(const at::Tensor& x, const std::shared_ptr<const quant::Nf4Tensor>& weight);

// x·Wᵀ (+ bias) for a layer whose weight may be held in NF4 (LinearImpl::
// nf4_base): nf4_matmul then, else nn::linear. `bias` may be undefined.
at::Tensor frozen_linear(const at::Tensor& x, const LinearImpl& layer, const at::Tensor& bias = at::Tensor());

// x·[W_1; ...; W_n]ᵀ for layers side by side (attention's q/k/v, the MLP's
// gate/up), their outputs in that order along the last dimension, one GEMM
// each way: dense weights through nn::linear_stacked; NF4 weights (all of
// the input's dtype) dequantized into one stacked weight, again in
// backward. Layers of mixed kinds: each GEMM apart, concatenated.
at::Tensor frozen_linear_stacked(const at::Tensor& x, const std::vector<const LinearImpl*>& layers);

// y [..., Σ out_i], the outputs of `layers` side by side (one layer's, or
// frozen_linear_stacked's), with each adapted layer's term added in its
// columns: one GEMM from x to every adapter's r columns (the A's stacked),
// one from there with the B's block-diagonal and y as the GEMM's C (ATen
// copies y into the result first: one pass, where separate terms took a
// GEMM and an add each). With dropout while training, each term apart (its
// own mask). Without tensor parallelism.
at::Tensor add_lora_terms(const at::Tensor& y, const at::Tensor& x, const std::vector<const LinearImpl*>& layers,
                          bool training);

// The adapter term scale · dropout(x)·Aᵀ·Bᵀ of `layer` (which has one:
// LinearImpl::add_lora), to add to the base's output. x: [..., in].
at::Tensor lora_delta(const at::Tensor& x, const LinearImpl& layer, bool training);

// The term under tensor parallelism, where the adapter is split as its base
// (models/tensor_parallel_plan.h); without a group both are lora_delta.
// Column-parallel layer (B split by rows, A whole): from the layer's input
// *outside* the split region (whole, or this rank's sequence slice), h =
// scale·x·Aᵀ enters the region (its r columns gathered or copied, their
// gradient summed there), then this rank's rows of B: A's gradient comes out
// whole on every rank, as a replicated parameter's must.
at::Tensor column_parallel_lora(const at::Tensor& x, const LinearImpl& layer, const tp::TensorParallel& tp,
                                bool training);
// Row-parallel layer (A split by columns, B whole): from the layer's input
// inside the region (this rank's columns), h = scale·x·Aᵀ summed over the
// group (r columns: a small all-reduce or reduce-scatter), then B. Add the
// result to the layer's output after its own group sum.
at::Tensor row_parallel_lora(const at::Tensor& x, const LinearImpl& layer, const tp::TensorParallel& tp,
                             bool training);

}  // namespace stratum::nn
