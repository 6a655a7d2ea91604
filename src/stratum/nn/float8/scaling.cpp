#include "stratum/nn/float8/scaling.h"

#include <ATen/ATen.h>

#include "stratum/core/error.h"

namespace stratum::nn::float8 {

at::ScalarType scalar_type(Format f) { return f == Format::e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2; }

double max_finite(Format f) { return f == Format::e4m3 ? 448.0 : 57344.0; }

const char* format_name(Format f) { return f == Format::e4m3 ? "e4m3" : "e5m2"; }

at::Tensor scale_from_amax(const at::Tensor& amax, Format f, bool power_of_2) {
  const at::Tensor guarded = amax.to(at::kFloat).clamp_min(kAmaxFloor);
  // One rounding (max / amax), as the kernels' __fdiv_rn: the same scale bit for bit.
  at::Tensor scale = at::full_like(guarded, max_finite(f)).div_(guarded);
  // Rounded down to a power of two by clearing the mantissa bits (exact, and
  // the same on every device; log2 may round up just below a power of two).
  // A NaN stays NaN.
  if (power_of_2)
    scale = at::where(at::isnan(scale), scale, scale.view(at::kInt).bitwise_and(0x7f800000).view(at::kFloat));
  return scale;
}

void check_finite_amax(const at::Tensor& amax, const std::string& what) {
  const at::Tensor bad = at::logical_not(at::isfinite(amax));
  if (!bad.any().item<bool>()) return;
  const bool nan = at::isnan(amax).any().item<bool>();
  throw Error("fp8: " + what + " holds " + (nan ? "NaN" : "Inf") +
              " (its amax is not finite, so no FP8 scale exists); the values went bad before this GEMM");
}

}  // namespace stratum::nn::float8
