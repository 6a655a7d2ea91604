#pragma once
// A row-wise function (the MLP: each token's output depends on its own row
// alone) run over tiles of rows, so that only one tile's intermediates are
// alive at a time: DeepSpeed's TiledMLP (Arctic Long Sequence Training).
// Forward runs fn on each tile without autograd, into one output; backward
// recomputes each tile under autograd and differentiates it at once: the
// input's gradient written tile by tile, the parameters' summed over the
// tiles (in fp32 for 16-bit parameters) and handed to autograd once.
// At a million tokens LLaMA-8B's MLP (FFN 14336) holds [T, 2 FFN] and
// [T, FFN] intermediates of 56 and 28 GiB in bf16; tiled at 4096 tokens,
// 0.33 GiB (and the weights' fp32 gradient sums, 0.66 GiB).
//
// A parameter's gradient comes back through autograd, not through a
// WeightGradSink (nn/linear.h): a layer running tiled reports its linear
// weights as not fusable (StackLayer::linear_weights_fusable).
#include <functional>

#include <ATen/core/Tensor.h>

namespace stratum::nn {

// Maps [..., C] to [..., C'] row by row (no randomness: it runs twice).
using RowFunction = std::function<at::Tensor(const at::Tensor&)>;

// fn over x [..., C] as [N, C] rows, `tile_rows` at a time: [..., C'].
// `params`: the tensors fn reads whose gradients it must produce (undefined
// ones and those not requiring grad are skipped). tile_rows <= 0, or at
// least N: fn(x) as one tile, through autograd as usual. Same values as fn(x).
at::Tensor tiled_rows(const RowFunction& fn, const at::Tensor& x, const std::vector<at::Tensor>& params,
                      int64_t tile_rows);

}  // namespace stratum::nn
