#pragma once
// One FP8 GEMM through ATen's _scaled_mm (cuBLASLt on a GPU): C [M, N] =
// A [M, K] · B [N, K]ᵀ with both operands contiguous along K, as cuBLASLt's
// FP8 kernels want them (A row-major, Bᵀ column-major). The three GEMMs of a
// linear layer in this form (nn/float8/float8_linear.h):
//   forward  y  = x · Wᵀ     A = x  [M, K],   B = W  [N, K]
//   dx          = dy · W     A = dy [M, N],   B = Wᵀ [K, N]  (W's transposed copy)
//   dW          = dyᵀ · x    A = dyᵀ [N, M],  B = xᵀ [K, M]  (both transposed copies)
#include <ATen/core/Tensor.h>

#include "stratum/nn/float8/cast.h"

namespace stratum::nn::float8 {

// a: [M, K], b: [N, K], scaled alike (both tensorwise: 0-dim scales; both
// rowwise: [M] and [N], one a row along K; both blockwise: 1x128 with
// 128x128 or 1x128 blocks, or 128x128 with 1x128, nn/float8/cast.h).
// `bias` [N] (out_dtype) or undefined. fast_accum: cuBLASLt's faster, less
// exact accumulation (the forward GEMM only, as torchao; blockwise GEMMs
// never). Off the GPU blockwise operands are multiplied dequantized, in
// fp32 (the CPU's _scaled_mm has no block scales). Throws naming the shapes
// where the GPU's kernels would refuse them (K and N multiples of 16; K of
// 128 under blockwise scales).
at::Tensor scaled_gemm(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType out_dtype,
                       const at::Tensor& bias = at::Tensor(), bool fast_accum = false);

// scaled_gemm written into `out` (a contiguous [M, N] of any dtype _scaled_mm
// gives, fp32 included: ZeRO's flat gradient), with no bias and no
// intermediate product.
void scaled_gemm_into(at::Tensor& out, const Float8Tensor& a, const Float8Tensor& b, bool fast_accum = false);

}  // namespace stratum::nn::float8
