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

// cuBLASLt reads a 128x128-scaled operand's scales in groups of four blocks
// along K (its layout pads K / 128 up to a multiple of 4; PyTorch #166752):
// with scales laid out unpadded, a K of 6 blocks gave dx 0.69 off fp32 on
// an H100 where 4 and 8 blocks gave 0.037 (2026-12-05). So on the GPU such a
// product's K is a multiple of 512: a blockwise layer's in and out widths.
constexpr int64_t kBlockwiseGpuK = 4 * kBlock;

// a: [M, K], b: [N, K], scaled alike (both tensorwise: 0-dim scales; both
// rowwise: [M] and [N], one a row along K; both blockwise: 1x128 with
// 128x128 or 1x128 blocks, or 128x128 with 1x128, nn/float8/cast.h).
// `bias` [N] (out_dtype) or undefined. fast_accum: cuBLASLt's faster, less
// exact accumulation (the forward GEMM only, as torchao; blockwise GEMMs
// never). Off the GPU the operands are multiplied dequantized, in fp32 (the
// same FP8 values; scaled_gemm.cpp says why not the CPU's _scaled_mm).
// Throws naming the shapes where the GPU's kernels would refuse them (K and
// N multiples of 16; K of 128 under blockwise scales) or give wrong products
// (K of kBlockwiseGpuK where an operand is in 128x128 blocks).
at::Tensor scaled_gemm(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType out_dtype,
                       const at::Tensor& bias = at::Tensor(), bool fast_accum = false);

// scaled_gemm written into `out` (a contiguous [M, N] of any dtype _scaled_mm
// gives, fp32 included: ZeRO's flat gradient), with no bias and no
// intermediate product.
void scaled_gemm_into(at::Tensor& out, const Float8Tensor& a, const Float8Tensor& b, bool fast_accum = false);

}  // namespace stratum::nn::float8
