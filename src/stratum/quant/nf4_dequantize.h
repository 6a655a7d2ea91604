#pragma once
// NF4 dequantized into a buffer the caller owns: several projections'
// weights written side by side into one stacked weight, so that their GEMM
// is one (nn/lora_linear.h's frozen_linear_stacked) and no output is
// concatenated after. The values are quant::dequantize_nf4's.
#include <ATen/core/Tensor.h>

#include "stratum/quant/nf4.h"

namespace stratum::quant {

// `out`: contiguous, q.numel() elements of q.dtype, on q's device.
void dequantize_nf4_into(const Nf4Tensor& q, const at::Tensor& out);

}  // namespace stratum::quant
