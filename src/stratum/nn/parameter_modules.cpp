#include "stratum/nn/parameter_modules.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/init.h>

#include <cmath>

#include "stratum/core/error.h"
#include "stratum/nn/deferred_init.h"

namespace stratum::nn {
namespace {
// The meta device asks for a skeleton's parameter (shapes only).
at::Tensor empty_on(std::vector<int64_t> shape, c10::Device device) {
  const at::ScalarType dtype = at::typeMetaToScalarType(at::get_default_dtype());
  if (device.is_meta()) return unmaterialized(shape, dtype);
  return at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
}
}  // namespace

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias, c10::Device device) : torch::nn::Module("Linear") {
  weight = register_parameter("weight", empty_on({out, in}, device));
  if (with_bias) bias = register_parameter("bias", empty_on({out}, device));
  if (device.is_meta()) return;
  // torch::nn::Linear's reset_parameters, so a layer made alone starts as torch's would.
  c10::AutoGradMode no_grad(false);
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    const double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

void LinearImpl::add_lora(int64_t r, double scale, double dropout) {
  if (has_lora()) throw Error("LoRA: layer '" + name() + "' already has an adapter");
  if (r < 1) throw Error("LoRA: rank r " + std::to_string(r) + " is below 1");
  // Unmaterialized: the model draws them by name (models/lora.h).
  lora_A = register_module("lora_A", std::make_shared<LinearImpl>(weight.size(1), r, /*bias=*/false, c10::kMeta));
  lora_B = register_module("lora_B", std::make_shared<LinearImpl>(r, weight.size(0), /*bias=*/false, c10::kMeta));
  lora_scale = scale;
  lora_dropout = dropout;
}

EmbeddingImpl::EmbeddingImpl(int64_t rows, int64_t dim, c10::Device device) : torch::nn::Module("Embedding") {
  weight = register_parameter("weight", empty_on({rows, dim}, device));
  if (device.is_meta()) return;
  c10::AutoGradMode no_grad(false);
  torch::nn::init::normal_(weight);
}

LayerNormImpl::LayerNormImpl(int64_t dim, double eps, c10::Device device) : torch::nn::Module("LayerNorm"), eps(eps) {
  weight = register_parameter("weight", empty_on({dim}, device));
  bias = register_parameter("bias", empty_on({dim}, device));
  if (device.is_meta()) return;
  c10::AutoGradMode no_grad(false);
  weight.fill_(1.0);
  bias.zero_();
}

}  // namespace stratum::nn
