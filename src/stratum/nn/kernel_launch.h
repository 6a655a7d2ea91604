#pragma once
// Host-side glue between nn/'s autograd functions and their CUDA kernels
// (cross-entropy, fused elementwise, GEMM epilogue; zero/ uses it too): which
// tensors the kernels take, a tensor's dtype tag and [rows, cols] view, the
// current stream, the column sums' workspace. Include only under
// STRATUM_WITH_CUDA_KERNELS.
#include <ATen/ops/empty.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <initializer_list>

#include "stratum/core/cuda_launch.h"
#include "stratum/nn/fused_elementwise_cuda.h"

namespace stratum::nn::cuda {

using stratum::cuda::check_launch;

// The floating dtypes the kernels know.
inline bool kernel_dtype(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat; }

// A kernel_dtype tensor's tag.
inline Dtype dtype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? Dtype::bf16 : t.scalar_type() == at::kHalf ? Dtype::f16 : Dtype::f32;
}

// GPU tensors in one floating dtype the kernels know.
inline bool on_gpu_in_one_dtype(std::initializer_list<const at::Tensor*> ts) {
  const at::Tensor& first = **ts.begin();
  for (const at::Tensor* t : ts)
    if (!t->defined() || !t->is_cuda() || t->scalar_type() != first.scalar_type()) return false;
  return kernel_dtype(first.scalar_type());
}

// Most kernels also take their tensors contiguous.
inline bool use_kernels(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts)
    if (!t->defined() || !t->is_contiguous()) return false;
  return on_gpu_in_one_dtype(ts);
}

inline Matrix matrix_of(const at::Tensor& t) {  // contiguous [..., cols]
  const int64_t cols = t.size(-1);
  return Matrix{t.const_data_ptr(), cols == 0 ? 0 : t.numel() / cols, cols, cols};
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// The fp32 scratch of a column sum over [rows, cols] (fused_elementwise_cuda.h).
inline at::Tensor column_sum_workspace(const at::Tensor& like, int64_t rows, int64_t cols) {
  return at::empty({column_sum_workspace_floats(rows, cols)}, like.options().dtype(at::kFloat));
}

}  // namespace stratum::nn::cuda
