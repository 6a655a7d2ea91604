#include "stratum/nn/lm_head.h"

#include <ATen/ATen.h>

#include "stratum/nn/linear.h"
#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/tiled_vocab_loss.h"
#include "stratum/nn/tiled_lm_loss.h"

namespace stratum::nn {

LMHeadLayer::LMHeadLayer(std::shared_ptr<EmbeddingImpl> embedding, tp::TensorParallel tp)
    : StackLayer("LMHead"), embedding_(std::move(embedding)), tp_(std::move(tp)) {}

LMHeadLayer::LMHeadLayer(int64_t hidden, int64_t vocab_rows, tp::TensorParallel tp, c10::Device device)
    : StackLayer("LMHead"), tp_(std::move(tp)) {
  lm_head_ = register_module("lm_head", Linear(hidden, vocab_rows, /*bias=*/false, device));
}

const at::Tensor& LMHeadLayer::weight() const { return embedding_ ? embedding_->weight : lm_head_->weight; }

bool LMHeadLayer::loss_tiled() const {
  return loss_tile_rows_ > 0 && (embedding_ || !(lm_head_->has_lora() || lm_head_->nf4_base));
}

bool LMHeadLayer::targets_fit(const at::Tensor& x) const {
  if (x.dim() < 1 || x.dim() != loss_targets_.dim() + 1) return false;
  if (x.sizes().slice(0, x.dim() - 1) == loss_targets_.sizes()) return true;
  // Sequence parallelism: x is this rank's slice of the sequence (dimension 1 of [B, T, C]).
  return tp_.enabled() && tp_.sequence_parallel && x.dim() == 3 && x.size(0) == loss_targets_.size(0) &&
         x.size(1) * tp_.size() == loss_targets_.size(1);
}

at::Tensor LMHeadLayer::forward(const at::Tensor& x) {
  const at::Tensor& w = weight();
  if (loss_targets_.defined() && loss_tiled() && targets_fit(x)) {
    if (!tp_.enabled()) return nn::tiled_lm_head_loss(x, w, loss_targets_, /*ignore_index=*/-100, loss_tile_rows_);
    return tp::through_region(x, tp_, [&](const at::Tensor& in) {
      return tp::tiled_vocab_parallel_lm_loss(in, w, loss_targets_, vocab_, tp_, loss_tile_rows_);
    });
  }
  // A shard's rows are a multiple of 64 already (nn::tp::padded_vocab_size).
  return tp_.enabled() ? tp::column_parallel_linear(x, w, at::Tensor(), tp_) : nn::linear_padded_rows(x, w);
}

std::vector<at::Tensor> LMHeadLayer::borrowed_parameters() const {
  if (embedding_) return {embedding_->weight};
  return {};
}

}  // namespace stratum::nn
