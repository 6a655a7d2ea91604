#pragma once
// RMSNorm (LLaMA): y = weight * (x / sqrt(mean(x^2) + eps)), the statistics in
// fp32 whatever the input dtype, rounded back to it before the weight multiply
// (Hugging Face's LlamaRMSNorm, so bf16 results match theirs bit for bit).
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace stratum::nn {

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;  // [dim], ones at construction
  double eps;
};

}  // namespace stratum::nn
