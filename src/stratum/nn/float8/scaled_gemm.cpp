#include "stratum/nn/float8/scaled_gemm.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"

namespace stratum::nn::float8 {

at::Tensor scaled_gemm(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType out_dtype, const at::Tensor& bias,
                       bool fast_accum) {
  if (a.data.dim() != 2 || b.data.dim() != 2 || a.data.size(1) != b.data.size(1))
    throw Error("fp8 GEMM: need A [M, K] and B [N, K], got " + c10::str(a.data.sizes()) + " and " +
                c10::str(b.data.sizes()));
  const bool tensorwise = a.scale_inv.dim() == 0;
  if (tensorwise != (b.scale_inv.dim() == 0))
    throw Error("fp8 GEMM: A and B scaled differently (one tensorwise, one rowwise)");
  const int64_t m = a.data.size(0), n = b.data.size(0), k = a.data.size(1);
  // cuBLASLt's FP8 kernels need 16-byte aligned leading dimensions.
  if (a.data.is_cuda() && (k % 16 != 0 || n % 16 != 0))
    throw Error("fp8 GEMM: [" + std::to_string(m) + ", " + std::to_string(k) + "] x [" + std::to_string(k) + ", " +
                std::to_string(n) + "]: K and N must be multiples of 16 on the GPU");
  const at::Tensor scale_a = tensorwise ? a.scale_inv : a.scale_inv.view({m, 1});
  const at::Tensor scale_b = tensorwise ? b.scale_inv : b.scale_inv.view({1, n});
  std::optional<at::Tensor> bias_opt;
  if (bias.defined()) bias_opt = bias.to(out_dtype);
  return at::_scaled_mm(a.data, b.data.t(), scale_a, scale_b, bias_opt, /*scale_result=*/std::nullopt, out_dtype,
                        fast_accum);
}

}  // namespace stratum::nn::float8
