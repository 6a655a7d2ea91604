#pragma once
// FP8 formats and the scale a tensor is cast with: scale = the format's
// largest finite value / amax, so the tensor's largest magnitude lands on the
// format's edge. GEMMs take the inverse (the dequantizing factor).
#include <ATen/core/Tensor.h>

#include <string>

namespace stratum::nn::float8 {

// e4m3 (max 448, 3 mantissa bits): the forward operands, and every operand
// under rowwise scaling. e5m2 (max 57344, 2 mantissa bits): gradients under
// tensorwise scaling, whose one scale must span a wider range of rows.
enum class Format { e4m3, e5m2 };
at::ScalarType scalar_type(Format f);  // kFloat8_e4m3fn, kFloat8_e5m2
double max_finite(Format f);
const char* format_name(Format f);

// An amax below this is taken as this: an all-zero tensor (or row) casts to
// zeros with a finite scale instead of dividing by zero.
constexpr double kAmaxFloor = 1e-12;

// fp32 max_finite(f) / max(amax, kAmaxFloor), elementwise over `amax`'s
// shape. power_of_2: rounded down to a power of two, so that scaling and its
// inverse are exact (torchao's rowwise recipe does the same).
at::Tensor scale_from_amax(const at::Tensor& amax, Format f, bool power_of_2);

// Throws stratum::Error naming `what` (the tensor and its layer) when
// `amax` holds an Inf or a NaN. Reads the values: a device sync on a GPU.
void check_finite_amax(const at::Tensor& amax, const std::string& what);

}  // namespace stratum::nn::float8
