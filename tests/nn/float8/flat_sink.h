#pragma once
// A weight-gradient sink for the FP8 layer tests (nn/linear.h): it hands out
// given destinations (fp32 views of one buffer, as ZeRO's flat gradient
// does) and counts the gradients written; registered for its weights while alive.
#include <ATen/ATen.h>

#include <vector>

#include "stratum/nn/linear.h"

namespace stratum::test {

struct FlatSink : nn::WeightGradSink {
  FlatSink(const std::vector<at::Tensor>& weights, const std::vector<at::Tensor>& dests, bool accumulate)
      : weights(weights), dests(dests), accumulate(accumulate) {
    for (const at::Tensor& w : weights) nn::register_weight_grad_sink(w, this);
  }
  ~FlatSink() override {
    for (const at::Tensor& w : weights) nn::unregister_weight_grad_sink(w, this);
  }
  at::Tensor weight_grad_destination(const at::Tensor& weight, bool* acc) override {
    for (size_t i = 0; i < weights.size(); ++i)
      if (weights[i].is_same(weight)) {
        *acc = accumulate;
        return dests[i];
      }
    return at::Tensor();
  }
  void weight_grad_written(const at::Tensor&) override { ++written; }
  std::vector<at::Tensor> weights, dests;
  bool accumulate;
  int written = 0;
};

}  // namespace stratum::test
