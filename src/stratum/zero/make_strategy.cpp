#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include "stratum/zero/zero_stages.h"

namespace stratum::zero {

void attach_grad_views(const at::Tensor& flat_grads, const FlatLayout& layout, std::vector<at::Tensor>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSlot& s = layout.params()[i];
    params[i].mutable_grad() = flat_grads.narrow(0, s.offset, s.numel).view(params[i].sizes());
  }
}

std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroOptions& options, std::vector<at::Tensor> params,
                                                 std::vector<std::string> names, at::ScalarType model_dtype,
                                                 std::shared_ptr<dist::Communicator> dp) {
  switch (options.stage) {
    case 0: return make_stage0(options, std::move(params), std::move(names), model_dtype, std::move(dp));
    case 1: return make_stage1(options, std::move(params), std::move(names), model_dtype, std::move(dp));
    case 2: return make_stage2(options, std::move(params), std::move(names), model_dtype, std::move(dp));
    default:
      throw Error("zero_optimization.stage " + std::to_string(options.stage) +
                  ": stage 3 is made by make_stage3 from the model's layers");
  }
}

}  // namespace stratum::zero
