// The parts of initialize() that touch torch::nn::Module (kept out of the
// header-only template so that only this file pulls in the module headers).
#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "stratum/engine/engine.h"

namespace stratum::engine_detail {

void trainable_parameters(torch::nn::Module& module, std::vector<at::Tensor>& params, std::vector<std::string>& names) {
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names.push_back(item.key());
    params.push_back(item.value());
  }
}

void prepare_module(torch::nn::Module& module, c10::Device device, at::ScalarType dtype) {
  module.to(device);
  // Module::to(dtype) would cast integer buffers too; only floating tensors change.
  c10::AutoGradMode no_grad(false);
  auto cast = [&](at::Tensor& t) {
    if (t.defined() && at::isFloatingType(t.scalar_type()) && t.scalar_type() != dtype) t.set_data(t.to(dtype));
  };
  for (auto& p : module.parameters(/*recurse=*/true)) cast(p);
  for (auto& b : module.buffers(/*recurse=*/true)) cast(b);
}

at::ScalarType training_dtype(const Config& config) {
  switch (config.precision()) {
    case config::DType::bf16: return at::kBFloat16;
    case config::DType::fp16: return at::kHalf;
    case config::DType::fp32: return at::kFloat;
  }
  return at::kFloat;
}

at::Tensor cast_input(const at::Tensor& t, at::ScalarType dtype) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.scalar_type() == dtype) return t;
  return t.to(dtype);
}

}  // namespace stratum::engine_detail
