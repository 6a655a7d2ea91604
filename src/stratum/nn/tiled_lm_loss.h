#pragma once
// The LM head and its mean cross-entropy fused and run a tile of rows at a
// time, so that no [N, vocab] tensor exists: at a million tokens and a
// 128K vocabulary the logits alone are 250 GiB in bf16; tiled at 4096
// tokens, about 5 GiB at the peak (a tile's logits, their fp32 softmax, the
// weight's fp32 gradient sum and one tile's product), plus 4 bytes a token
// (DeepSpeed ALST's TiledFusedLogitsLoss). Forward keeps each row's log-sum-exp (fp32) and the
// hidden states it was given; backward recomputes each tile's logits, writes
// the tile's hidden gradient and adds its weight gradient to an fp32 sum.
// The logits are taken in the model's dtype and the softmax in fp32, as the
// untiled head and nn::chunked_cross_entropy do: the same loss and gradients.
//
// The weight's gradient comes back through autograd (the head's layer then
// reports its weight as not fusable, nn/linear.h); a tied head's weight is
// the embedding's and gets this gradient added to the lookup's.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace stratum::nn {

// hidden: [..., C] (after the final norm); weight: [V, C]; targets: [...]
// integer, hidden's leading shape. Returns the 0-dim fp32 mean of
// -log softmax(hidden Wᵀ)[target] over the rows whose target is not
// `ignore_index` (NaN when all are, as torch), `tile_rows` rows at a time.
// On a GPU a vocabulary that is not a multiple of 64 runs on the weight
// padded with zero rows (nn::linear_padded_rows' reason), once per pass.
at::Tensor tiled_lm_head_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                              int64_t ignore_index = -100, int64_t tile_rows = 4096);

}  // namespace stratum::nn
