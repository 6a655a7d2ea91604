#pragma once
// The data-parallel mean of an embedding's gradient from every rank's looked-up
// rows (row_scatter_cuda.cu), added straight into the part of the flat
// gradient this rank holds: ATen's embedding_dense_backward would first
// materialize the whole [vocab, hidden] gradient (1 GB in fp32 for a 128k
// vocabulary) to add a few thousand rows. Sums each id's rows in the order of
// a stable sort, so the result is deterministic. Plain pointers, no torch
// headers, so nvcc compiles only this.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::zero::cuda {

using stratum::cuda::Dtype;

// For every run of equal ids in `sorted_ids` [n] (ascending; `order` [n] maps
// a sorted position to its row of `rows` [*, hidden]), adds `scale` times the
// sum of the run's rows to the weight's flattened elements [begin, end), which
// live at dest[0, end - begin).
cudaError_t launch_add_sorted_rows(const int64_t* sorted_ids, const int64_t* order, int64_t n, const void* rows,
                                   Dtype dtype, int64_t hidden, float scale, float* dest, int64_t begin,
                                   int64_t end, cudaStream_t stream);

}  // namespace stratum::zero::cuda
