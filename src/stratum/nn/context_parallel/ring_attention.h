#pragma once
// Ring attention (Liu et al. 2023) over the zigzag split (context_split.h):
// each ring rank's queries meet every rank's keys and values as the blocks
// travel around the ring, one hop a step, the next block's transfer under
// the current block's attention. Each block gives its output and its rows'
// log-sum-exp, merged into the running ones (the online softmax); the
// backward recomputes the blocks in the same order from the merged output and
// log-sum-exp (as flash attention's backward does for its tiles), the
// key/value gradients travelling around the ring with their blocks and
// arriving home after the last hop.
//
// Under the zigzag split no mask is needed: a rank's own block is causal, a
// block from an earlier ring rank meets all queries with its first half, one
// from a later rank meets all of itself with the second half of the queries.
// Packed rows instead mask each block by segment and position.
//
// Blocks run through the flash kernels that return the log-sum-exp (ATen's
// CPU flash kernel; on CUDA, fp16/bf16, FlashAttention-2); masked blocks, and
// what those kernels do not take, through the same math in ATen ops (fp32, a
// tile of query rows at a time: no block's whole score matrix is held).
#include <ATen/core/Tensor.h>

#include "stratum/nn/context_parallel/context_parallel.h"

namespace stratum::nn::cp {

// q: [B, H, n, D], k, v: [B, KV, n, D]: the ring rank's tokens (its chunks i
// and 2r - 1 - i in order). `shard.whole`, when set, masks by segment.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ContextShard& shard);

}  // namespace stratum::nn::cp
