#pragma once
// Models born sharded: a module built as a skeleton (its parameters
// unmaterialized: shapes without storage) that can draw any one parameter's
// initial value alone, by name. Each rank then materialises only what it keeps (its
// pipeline stage's layers, its tensor-parallel pieces, at ZeRO-3 one layer at
// a time before keeping its partition) with the values the whole model,
// built in one process from the same seed, would have had.
#include <functional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace torch::nn {
class Module;
}

namespace stratum::quant {
struct Nf4Tensor;
}

namespace stratum::nn {

// A parameter not drawn yet: its shape and dtype over one shared element of
// CPU storage (every stride 0), so that a skeleton has every name and shape
// and allocates nothing. Not the meta device: autograd's set_data refuses to
// move a meta tensor to real storage, and drawing must keep the parameter's
// identity (the modules and the engine hold the tensor itself).
at::Tensor unmaterialized(at::IntArrayRef shape, at::ScalarType dtype);
bool is_unmaterialized(const at::Tensor& t);

class DeferredInit {
 public:
  virtual ~DeferredInit() = default;
  // Parameter `name`'s initial value as this module holds it (its
  // tensor-parallel piece), on `device` in `dtype`. Never more than one
  // whole parameter is drawn at a time.
  virtual at::Tensor initial_value(const std::string& name, c10::Device device, at::ScalarType dtype) const = 0;

  // A parameter held apart from its own tensor (a frozen weight in NF4:
  // nn::LinearImpl::nf4_base). materialize() never sets its data (it stays
  // unmaterialized: a name and a shape) but has draw_apart draw it into its
  // other form; set_apart replaces a drawn one's value with `value` (this
  // rank's piece, e.g. read from a checkpoint) and says whether this rank
  // holds it.
  virtual bool held_apart(const std::string& /*name*/) const { return false; }
  virtual void draw_apart(const std::string& /*name*/, c10::Device /*device*/, at::ScalarType /*dtype*/) {}
  virtual bool set_apart(const std::string& /*name*/, const at::Tensor& /*value*/) { return false; }
  // The same from a value already in NF4 (a bitsandbytes-quantized
  // checkpoint's, the whole weight): taken as it is, not quantized again.
  virtual bool set_apart_nf4(const std::string& /*name*/, const quant::Nf4Tensor& /*value*/) { return false; }
};

// Draws every unmaterialized parameter of `module` for which `keep` (given
// its name) is true, on `device` in `dtype` (one held apart: into its other
// form, DeferredInit::draw_apart); those it refuses stay unmaterialized. Throws stratum::Error naming the parameter when `module`
// has unmaterialized parameters but is not a DeferredInit.
void materialize(torch::nn::Module& module, c10::Device device, at::ScalarType dtype,
                 const std::function<bool(const std::string&)>& keep = nullptr);

// Whether any parameter of `module` is unmaterialized (a skeleton).
bool has_unmaterialized_parameters(torch::nn::Module& module);

}  // namespace stratum::nn
