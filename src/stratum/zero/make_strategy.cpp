#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include "stratum/zero/zero_stages.h"

namespace stratum::zero {

std::unique_ptr<ZeroStrategy> make_zero_strategy(const ZeroOptions& options, std::vector<at::Tensor> params,
                                                 std::vector<std::string> names, at::ScalarType model_dtype,
                                                 std::shared_ptr<distributed::Communicator> dp, const LayerParams* layers) {
  switch (options.stage) {
    case 0: return make_stage0(options, std::move(params), std::move(names), model_dtype, std::move(dp));
    case 1: return make_stage1(options, std::move(params), std::move(names), model_dtype, std::move(dp), layers);
    case 2: return make_stage2(options, std::move(params), std::move(names), model_dtype, std::move(dp), layers);
    default:
      throw Error("zero_optimization.stage " + std::to_string(options.stage) +
                  ": stage 3 is made by make_stage3 from the model's layers");
  }
}

}  // namespace stratum::zero
