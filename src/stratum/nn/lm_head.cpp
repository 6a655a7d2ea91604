#include "stratum/nn/lm_head.h"

#include <ATen/ATen.h>

#include "stratum/nn/linear.h"

namespace stratum::nn {

LMHeadLayer::LMHeadLayer(std::shared_ptr<torch::nn::EmbeddingImpl> embedding)
    : StackLayer("LMHead"), embedding_(std::move(embedding)) {}

LMHeadLayer::LMHeadLayer(int64_t hidden, int64_t vocab_size) : StackLayer("LMHead") {
  lm_head_ = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(hidden, vocab_size).bias(false)));
}

at::Tensor LMHeadLayer::forward(const at::Tensor& x) {
  return nn::linear_padded_rows(x, embedding_ ? embedding_->weight : lm_head_->weight);
}

std::vector<at::Tensor> LMHeadLayer::borrowed_parameters() const {
  if (embedding_) return {embedding_->weight};
  return {};
}

}  // namespace stratum::nn
