// See row_scatter_cuda.h. One block per run of equal ids (grid-stride over
// sorted positions; a position that continues a run is skipped), its threads
// across the row's columns that fall in [begin, end).
#include "stratum/zero/row_scatter_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "stratum/core/cuda_float_convert.cuh"
#include "stratum/core/cuda_kernel_util.cuh"

namespace stratum::zero::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_sorted_rows_kernel(const int64_t* sorted_ids, const int64_t* order, int64_t n, const T* rows, int64_t hidden,
                           float scale, float* dest, int64_t begin, int64_t end) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) continue;  // not the run's first position
    const int64_t first = id * hidden;
    const int64_t lo = first > begin ? first : begin, hi = first + hidden < end ? first + hidden : end;
    for (int64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
      float sum = 0.0f;
      for (int64_t j = i; j < n && sorted_ids[j] == id; ++j) sum += cuda_detail::widen<T>(rows[order[j] * hidden + (e - first)]);
      dest[e - begin] += scale * sum;
    }
  }
}

template <typename T>
cudaError_t launch(const int64_t* sorted_ids, const int64_t* order, int64_t n, const void* rows, int64_t hidden,
                   float scale, float* dest, int64_t begin, int64_t end, cudaStream_t stream) {
  const unsigned blocks = cuda_detail::capped_grid(n, 1, 32);
  add_sorted_rows_kernel<T><<<blocks, kThreads, 0, stream>>>(sorted_ids, order, n, static_cast<const T*>(rows), hidden,
                                                             scale, dest, begin, end);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_add_sorted_rows(const int64_t* sorted_ids, const int64_t* order, int64_t n, const void* rows,
                                   Dtype dtype, int64_t hidden, float scale, float* dest, int64_t begin,
                                   int64_t end, cudaStream_t stream) {
  if (n == 0 || end <= begin) return cudaSuccess;
  switch (dtype) {
    case Dtype::bf16:
      return launch<__nv_bfloat16>(sorted_ids, order, n, rows, hidden, scale, dest, begin, end, stream);
    case Dtype::f16:
      return launch<__half>(sorted_ids, order, n, rows, hidden, scale, dest, begin, end, stream);
    default:
      return launch<float>(sorted_ids, order, n, rows, hidden, scale, dest, begin, end, stream);
  }
}

}  // namespace stratum::zero::cuda
