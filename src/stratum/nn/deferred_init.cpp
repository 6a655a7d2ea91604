#include "stratum/nn/deferred_init.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "stratum/core/error.h"

namespace stratum::nn {
namespace {
// The one element every unmaterialized tensor views (16 bytes: any dtype's element fits).
const c10::Storage& skeleton_storage() {
  static const c10::Storage storage = at::empty({16}, at::kByte).storage();
  return storage;
}
}  // namespace

at::Tensor unmaterialized(at::IntArrayRef shape, at::ScalarType dtype) {
  const std::vector<int64_t> strides(shape.size(), 0);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(skeleton_storage(), 0, shape, strides);
}

bool is_unmaterialized(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.storage().unsafeGetStorageImpl() == skeleton_storage().unsafeGetStorageImpl();
}

void materialize(torch::nn::Module& module, c10::Device device, at::ScalarType dtype,
                 const std::function<bool(const std::string&)>& keep) {
  auto* source = dynamic_cast<DeferredInit*>(&module);
  c10::AutoGradMode no_grad(false);
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    at::Tensor& p = item.value();
    if (!is_unmaterialized(p) || (keep && !keep(item.key()))) continue;
    if (source && source->held_apart(item.key())) {
      source->draw_apart(item.key(), device, dtype);
      continue;
    }
    if (!source)
      throw Error("parameter '" + item.key() + "' is not drawn yet (a skeleton's) and its module '" + module.name() +
                  "' cannot draw it (it is not a stratum::nn::DeferredInit); build the model with its values");
    at::Tensor value = source->initial_value(item.key(), device, dtype);
    if (value.sizes() != p.sizes())
      throw Error("parameter '" + item.key() + "': its drawn value is " + c10::str(value.sizes()) + " but the model's "
                  "parameter is " + c10::str(p.sizes()));
    p.set_data(value);
  }
}

bool has_unmaterialized_parameters(torch::nn::Module& module) {
  for (const auto& p : module.parameters(/*recurse=*/true))
    if (is_unmaterialized(p)) return true;
  return false;
}

}  // namespace stratum::nn
