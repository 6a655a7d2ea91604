#pragma once
// The parameter holders the built-in models are made of: Linear, Embedding
// and LayerNorm with torch's names (weight, bias) and torch's initial values,
// made on any device. Made for the meta device they hold shapes only
// (unmaterialized tensors: nothing allocated or drawn): a model's skeleton, of
// which each rank then materialises only what it keeps (nn/deferred_init.h). The math lives in
// nn/linear.h, nn/embedding.h and nn/layer_norm.h; these hold the tensors.
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "stratum/quant/nf4.h"

namespace stratum::nn {

// weight [out, in], bias [out] unless `bias` is false. On a device with
// storage: torch::nn::Linear's values (kaiming-uniform weight, uniform bias).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias = true, c10::Device device = c10::kCPU);
  at::Tensor weight, bias;

  // A LoRA adapter beside the weight (nn/lora_linear.h computes its term):
  // submodules "lora_A" (weight [r, in]) and "lora_B" (weight [out, r]), as
  // peft names them, so an adapter's parameters are `<layer>.lora_A.weight`.
  // Made unmaterialized (nn/deferred_init.h): the model draws them by name
  // (models/lora.h: peft's A kaiming-uniform, B zero). The caller freezes
  // the base.
  void add_lora(int64_t r, double scale, double dropout);
  bool has_lora() const { return lora_A != nullptr; }
  std::shared_ptr<LinearImpl> lora_A, lora_B;
  double lora_scale = 0.0, lora_dropout = 0.0;

  // A frozen weight held in 4-bit NormalFloat (QLoRA): `weight` then stays an
  // unmaterialized parameter (its name and shape, no storage) and `nf4` holds
  // the values once drawn or loaded (models/lora.h). nn/lora_linear.h's
  // frozen_linear reads it, dequantized for each GEMM and never kept.
  bool nf4_base = false;
  std::shared_ptr<const quant::Nf4Tensor> nf4;
};
TORCH_MODULE(Linear);

// weight [rows, dim]; on a device with storage: normal(0, 1), as torch's.
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t rows, int64_t dim, c10::Device device = c10::kCPU);
  at::Tensor weight;
};
TORCH_MODULE(Embedding);

// weight [dim] (ones), bias [dim] (zeros).
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, double eps, c10::Device device = c10::kCPU);
  at::Tensor weight, bias;
  double eps;
};
TORCH_MODULE(LayerNorm);

}  // namespace stratum::nn
