#pragma once
// RMSNorm (LLaMA): y = weight * (x / sqrt(mean(x^2) + eps)), the statistics in
// fp32 whatever the input dtype. With the weight in x's dtype this is ATen's
// fused rms_norm, which multiplies by the weight before rounding once
// (Megatron's and Transformer Engine's order; Hugging Face's LlamaRMSNorm rounds
// the normalized x first, so 16-bit outputs may differ from theirs by one
// rounding). Mixed dtypes keep Hugging Face's composition.
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace stratum::nn {

class RMSNormImpl : public torch::nn::Module {
 public:
  // `device`: where the weight is made (meta: its shape only).
  RMSNormImpl(int64_t dim, double eps, c10::Device device = c10::kCPU);
  // With `amax`: where the GPU kernel runs (nn/norm_forward.h), set to max
  // |output| (fp32 0-dim) from the forward's own pass, for an FP8
  // projection's tensorwise cast of the output; elsewhere undefined.
  at::Tensor forward(const at::Tensor& x, at::Tensor* amax = nullptr);

  at::Tensor weight;  // [dim], ones at construction
  double eps;
};

}  // namespace stratum::nn
