#pragma once
// Mean next-token cross-entropy over [N, V] logits in the training dtype,
// computed a block of rows at a time in fp32: never a full-vocabulary fp32
// copy of the logits, their log-softmax or their gradient (12 bytes a logit at
// the peak for at::cross_entropy on bf16 logits widened to fp32; here the
// 16-bit gradient plus one block in fp32). Forward keeps each row's target
// log-probability (one fused log-softmax per block); backward recomputes the
// block's softmax and writes (softmax - onehot) * scale in the logits' dtype.
// Rows whose target is `ignore_index` count neither in the loss nor the mean.
// On a GPU (builds with Stratum's CUDA kernels) the same math runs as one
// kernel per direction (nn/cross_entropy_cuda.h): a pass over each row
// forward, keeping its log-sum-exp, and one pass writing the gradient.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace stratum::nn {

// logits: [..., V] floating (any dtype); targets: [...] integer, same leading
// shape. Returns a 0-dim fp32 loss (NaN when every target is ignored, as torch).
// `consume_logits`: the caller keeps the logits for nothing else (a model's
// own loss): backward writes their gradient over them, element by element
// after reading each, instead of into a second vocabulary-wide buffer
// (at seq 8192 and a 128K vocabulary, 2 GiB less at the peak).
at::Tensor chunked_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index = -100,
                                 int64_t block_rows = 4096, bool consume_logits = false);

}  // namespace stratum::nn
