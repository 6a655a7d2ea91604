#include "stratum/nn/tensor_parallel/float8_parallel_linear.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"
#include "stratum/nn/float8/float8_linear.h"

namespace stratum::nn::tp {

void share_float8_amax(float8::Float8Projection& projection, float8::SplitAxis axis, const TensorParallel& tp) {
  if (!tp.enabled()) return;
  // The projection keeps the group (the model holds it as long as the projection).
  std::shared_ptr<distributed::Communicator> group = tp.group;
  projection.share_amax(axis, [group](at::Tensor& amax) {
    at::Tensor flat = amax.view({-1});  // a 0-dim amax as one element
    group->all_reduce(flat, distributed::ReduceOp::max)->wait();
  });
}

bool row_input_takes_amax(const float8::Float8Projection* projection) {
  return projection != nullptr && projection->recipe().scaling == float8::Scaling::tensorwise;
}

bool column_input_takes_amax(const float8::Float8Projection* projection, const TensorParallel& tp) {
  return row_input_takes_amax(projection) && !(tp.enabled() && tp.sequence_parallel);
}

at::Tensor column_parallel_float8_linear(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                         const at::Tensor& bias, float8::Float8Projection& projection,
                                         const TensorParallel& tp, const at::Tensor& x_amax) {
  if (x_amax.defined() && !column_input_takes_amax(&projection, tp))
    throw Error("column_parallel_float8_linear: " + projection.name() +
                " was handed its input's amax, which it can take only with tensorwise scaling and its input not "
                "gathered along the sequence");
  return float8::float8_linear(enter_region(x, tp), weights, bias, projection, x_amax);
}

at::Tensor row_parallel_float8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                      float8::Float8Projection& projection, const TensorParallel& tp,
                                      const at::Tensor& x_amax) {
  if (!tp.enabled()) return float8::float8_linear(x, {weight}, bias, projection, x_amax);
  const at::Tensor y = leave_region(float8::float8_linear(x, {weight}, at::Tensor(), projection, x_amax), tp);
  return bias.defined() ? y + bias : y;
}

}  // namespace stratum::nn::tp
