#pragma once
// The last layer of a language model: hidden [B, T, C] -> logits [B, T, V].
// Untied: its own `lm_head` Linear without bias ([V, C]). Tied: it borrows the
// token embedding's weight (read at every call, so a moved or re-cast
// embedding is seen) and owns no parameter, so the shared tensor is counted,
// reduced and updated once. Under tensor parallelism (`tp`) the weight is
// this rank's rows of the padded vocabulary and the logits its columns
// (column parallel; nn/tensor_parallel/layers.h).
#include <memory>

#include "stratum/nn/layer_stack.h"
#include "stratum/nn/parameter_modules.h"
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
  bool linear_weights_fusable() const override { return !tied(); }
  bool tied() const { return embedding_ != nullptr; }

 private:
  std::shared_ptr<EmbeddingImpl> embedding_;  // tied: not registered here
  Linear lm_head_{nullptr};                    // untied
  tp::TensorParallel tp_;
};

}  // namespace stratum::nn
