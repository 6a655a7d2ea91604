#include "stratum/nn/float8/scaled_gemm.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"

namespace stratum::nn::float8 {

namespace {

// The blockwise pairs cuBLASLt multiplies (Hopper, CUDA >= 12.9): A in 1x128
// blocks with B in 128x128 or 1x128 ones, or A in 128x128 with B in 1x128.
// A single row's 1x128 blocks are its 128x128 ones too.
std::pair<Scaling, Scaling> block_pair(const Float8Tensor& a, const Float8Tensor& b) {
  Scaling sa = block_scaling(a), sb = block_scaling(b);
  if (sa == Scaling::blocks_128x128 && sb == Scaling::blocks_128x128) {
    if (a.data.size(0) == 1) sa = Scaling::blocks_1x128;
    else if (b.data.size(0) == 1) sb = Scaling::blocks_1x128;
    else throw Error("fp8 GEMM: both operands in 128x128 blocks (cuBLASLt takes 1x128 x 128x128, 128x128 x 1x128 "
                     "and 1x128 x 1x128)");
  }
  return {sa, sb};
}

// Every product off the GPU: the operands dequantized, multiplied in fp32.
// The CPU's _scaled_mm takes tensorwise scales only in the torch of the GPU
// machines (2.11), and on a CPU without FP8 instructions torch 2.13 runs it
// through oneDNN's reference matmul, ~25x slower than this (the FP8
// composition tests passed their time limit): the emulation depends on neither.
at::Tensor dequantized_gemm(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType out_dtype,
                            const at::Tensor& bias) {
  at::Tensor y = dequantize(a).mm(dequantize(b).t());
  if (bias.defined()) y.add_(bias.to(at::kFloat));
  return y.to(out_dtype);
}

}  // namespace

namespace {

// The operands' scales as _scaled_mm takes them, after the checks every
// product makes; `dequantized`: no _scaled_mm (dequantized_gemm).
struct Prepared {
  at::Tensor scale_a, scale_b;
  bool fast_accum = false;
  bool dequantized = false;
};

Prepared prepare(const Float8Tensor& a, const Float8Tensor& b, bool fast_accum) {
  if (a.data.dim() != 2 || b.data.dim() != 2 || a.data.size(1) != b.data.size(1))
    throw Error("fp8 GEMM: need A [M, K] and B [N, K], got " + c10::str(a.data.sizes()) + " and " +
                c10::str(b.data.sizes()));
  const bool tensorwise = a.scale_inv.dim() == 0, blockwise = a.scale_inv.dim() == 2;
  if (tensorwise != (b.scale_inv.dim() == 0) || blockwise != (b.scale_inv.dim() == 2))
    throw Error("fp8 GEMM: A and B scaled differently (scales " + c10::str(a.scale_inv.sizes()) + " and " +
                c10::str(b.scale_inv.sizes()) + ")");
  const int64_t m = a.data.size(0), n = b.data.size(0), k = a.data.size(1);
  const std::string shapes = "[" + std::to_string(m) + ", " + std::to_string(k) + "] x [" + std::to_string(k) +
                             ", " + std::to_string(n) + "]";
  // cuBLASLt's FP8 kernels need 16-byte aligned leading dimensions.
  if (a.data.is_cuda() && (k % 16 != 0 || n % 16 != 0))
    throw Error("fp8 GEMM: " + shapes + ": K and N must be multiples of 16 on the GPU");
  if (!a.data.is_cuda()) {
    if (blockwise) block_pair(a, b);  // the pairs the GPU refuses are refused here too
    return {at::Tensor(), at::Tensor(), false, true};
  }
  if (!blockwise)
    return {tensorwise ? a.scale_inv : a.scale_inv.view({m, 1}), tensorwise ? b.scale_inv : b.scale_inv.view({1, n}),
            fast_accum, false};
  const auto [sa, sb] = block_pair(a, b);
  if (k % kBlock != 0) throw Error("fp8 GEMM: " + shapes + ": blockwise scales need K a multiple of 128 on the GPU");
  if ((sa == Scaling::blocks_128x128 || sb == Scaling::blocks_128x128) && k % kBlockwiseGpuK != 0)
    throw Error("fp8 GEMM: " + shapes + ": an operand in 128x128 blocks needs K a multiple of " +
                std::to_string(kBlockwiseGpuK) + " on the GPU (cuBLASLt reads its scales four blocks at a time "
                "along K and gives wrong products otherwise)");
  // ATen's layouts: A's 1x128 scales outer-dim-major ([M, K/128], strides
  // (1, M)); B's passed for Bᵀ [K, N]: 1x128 as a contiguous [K/128, N],
  // 128x128 as the transpose of the contiguous [N/128, K/128]. Blockwise
  // GEMMs take no fast accumulation: the scales are applied in the
  // accumulation itself.
  return {sa == Scaling::blocks_1x128 ? a.scale_inv.t().contiguous().t() : a.scale_inv.contiguous(),
          sb == Scaling::blocks_1x128 ? b.scale_inv.t().contiguous() : b.scale_inv.contiguous().t(), false, false};
}

}  // namespace

at::Tensor scaled_gemm(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType out_dtype, const at::Tensor& bias,
                       bool fast_accum) {
  const Prepared p = prepare(a, b, fast_accum);
  if (p.dequantized) return dequantized_gemm(a, b, out_dtype, bias);
  // cuBLASLt's block-scaled kernels refused GPT-2's forward with its bias on
  // the H200 (CUBLAS_STATUS_NOT_SUPPORTED; torch 2.11, CUDA 13.0) while the
  // same products without one ran: there the bias is added after.
  const bool bias_after = bias.defined() && a.scale_inv.dim() == 2;
  std::optional<at::Tensor> bias_opt;
  if (bias.defined() && !bias_after) bias_opt = bias.to(out_dtype);
  at::Tensor y = at::_scaled_mm(a.data, b.data.t(), p.scale_a, p.scale_b, bias_opt, /*scale_result=*/std::nullopt,
                                out_dtype, p.fast_accum);
  if (bias_after) y.add_(bias.to(out_dtype));
  return y;
}

void scaled_gemm_into(at::Tensor& out, const Float8Tensor& a, const Float8Tensor& b, bool fast_accum) {
  const Prepared p = prepare(a, b, fast_accum);
  if (out.dim() != 2 || out.size(0) != a.data.size(0) || out.size(1) != b.data.size(0) || !out.is_contiguous())
    throw Error("fp8 GEMM: the output " + c10::str(out.sizes()) + " is not a contiguous [" +
                std::to_string(a.data.size(0)) + ", " + std::to_string(b.data.size(0)) + "] matrix");
  if (p.dequantized) {
    out.copy_(dequantized_gemm(a, b, out.scalar_type(), at::Tensor()));
    return;
  }
  at::_scaled_mm_out(out, a.data, b.data.t(), p.scale_a, p.scale_b, /*bias=*/std::nullopt,
                     /*scale_result=*/std::nullopt, out.scalar_type(), p.fast_accum);
}

}  // namespace stratum::nn::float8
