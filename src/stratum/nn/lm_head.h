#pragma once
// The last layer of a language model: hidden [B, T, C] -> logits [B, T, V].
// Untied: its own `lm_head` Linear without bias ([V, C]). Tied: it borrows the
// token embedding's weight (read at every call, so a moved or re-cast
// embedding is seen) and owns no parameter, so the shared tensor is counted,
// reduced and updated once. Under tensor parallelism (`tp`) the weight is
// this rank's rows of the padded vocabulary and the logits its columns
// (column parallel; nn/tensor_parallel/layers.h).
//
// Tiled loss (set_loss_tiling, nn/tiled_lm_loss.h): while loss targets are
// set, forward returns the mean cross-entropy of its logits against them
// (0-dim fp32), computed a tile of rows at a time, instead of the logits:
// the loss is taken inside the head's own layer, so ZeRO-3 has its weight
// (or the tied embedding's) gathered for both passes. Under tensor
// parallelism the tiles are this rank's vocabulary columns, the loss reduced
// over the group (nn/tensor_parallel/tiled_vocab_loss.h). Not for a head
// whose weight is not plain (LoRA, NF4): forward returns logits then.
#include <memory>

#include "stratum/nn/layer_stack.h"
#include "stratum/nn/parameter_modules.h"
#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn {

class LMHeadLayer : public StackLayer {
 public:
  // Tied to `embedding`.
  explicit LMHeadLayer(std::shared_ptr<EmbeddingImpl> embedding, tp::TensorParallel tp = {});
  // Untied: `vocab_rows` rows (this rank's under tensor parallelism), made on `device`.
  LMHeadLayer(int64_t hidden, int64_t vocab_rows, tp::TensorParallel tp = {}, c10::Device device = c10::kCPU);

  at::Tensor forward(const at::Tensor& x) override;
  std::vector<at::Tensor> borrowed_parameters() const override;
  // Untied: the head's weight goes through one nn::linear. (Tied: the
  // embedding's lookup reads it too; borrowed parameters are never fused.)
  // Tiled, the weight's gradient comes back through autograd instead.
  bool linear_weights_fusable() const override { return !tied() && loss_tile_rows_ == 0; }
  bool tied() const { return embedding_ != nullptr; }

  // Rows a tile of the tiled loss (0: the head returns logits); under tensor
  // parallelism `shard` is the vocabulary rows this rank's weight holds.
  void set_loss_tiling(int64_t tile_rows, tp::VocabShard shard = {}) {
    loss_tile_rows_ = tile_rows;
    vocab_ = shard;
  }
  // Whether forward can return the tiled loss: tiling on, a plain weight.
  bool loss_tiled() const;
  // Targets [...] (the hidden input's leading shape; under sequence
  // parallelism the whole sequence's) forward's loss is taken against;
  // undefined: logits again. They stay set until replaced, as activation
  // checkpointing may run the head again in backward. Input of another
  // leading shape gets logits.
  void set_loss_targets(at::Tensor targets) { loss_targets_ = std::move(targets); }

 private:
  const at::Tensor& weight() const;
  // Whether input x is of the rows loss_targets_ names.
  bool targets_fit(const at::Tensor& x) const;

  std::shared_ptr<EmbeddingImpl> embedding_;  // tied: not registered here
  Linear lm_head_{nullptr};                    // untied
  tp::TensorParallel tp_;
  int64_t loss_tile_rows_ = 0;
  tp::VocabShard vocab_;  // tensor parallelism: this rank's rows
  at::Tensor loss_targets_;
};

}  // namespace stratum::nn
