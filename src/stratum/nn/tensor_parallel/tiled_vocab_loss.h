#pragma once
// The LM head and its cross-entropy under tensor parallelism, a tile of rows
// at a time: nn/tiled_lm_loss.h's tiled loss over a vocabulary split by rows
// (vocab_parallel_cross_entropy's layout), so that neither [N, V / size]
// logits nor their gradient ever exist whole on a rank. Forward keeps each
// row's local max, sum of exponentials and target logit (fp32), reduced over
// the group once for all rows (a max and a sum of 3 N floats), then the
// row's log-sum-exp; backward recomputes each tile's logits shard, writes the
// tile's partial hidden gradient (enter_region's backward sums the ranks')
// and adds the tile's weight gradient to an fp32 sum.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "stratum/nn/tensor_parallel/layers.h"
#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn::tp {

// hidden: [..., C] inside the region (the whole sequence: after enter_region);
// weight: this rank's [shard.rows, C] rows of the padded vocabulary; targets:
// global ids of hidden's leading shape. Returns the 0-dim fp32 mean of
// -log softmax over the whole vocabulary at the target, over the rows whose
// target is not `ignore_index`: the same on every rank of the group.
at::Tensor tiled_vocab_parallel_lm_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                        const VocabShard& shard, const TensorParallel& tp, int64_t tile_rows,
                                        int64_t ignore_index = -100);

}  // namespace stratum::nn::tp
