#include "stratum/nn/float8/cast.h"

#include <ATen/ATen.h>

#include <limits>

#include "stratum/core/error.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/float8/cast_cuda.h"
#include "stratum/nn/kernel_launch.h"
#endif

namespace stratum::nn::float8 {
namespace {

void check_input(const at::Tensor& x2d) {
  if (!x2d.defined() || x2d.dim() != 2)
    throw Error("fp8 cast: need a [rows, cols] matrix, got " +
                (x2d.defined() ? c10::str(x2d.sizes()) : std::string("undefined")));
  const auto t = x2d.scalar_type();
  if (t != at::kBFloat16 && t != at::kHalf && t != at::kFloat)
    throw Error(std::string("fp8 cast: need bf16, fp16 or fp32 values, got ") + c10::toString(t));
}

// x (fp32) scaled by `scale` (broadcast), clamped to the format's range, in FP8.
at::Tensor saturating_cast(const at::Tensor& x, const at::Tensor& scale, Format f) {
  const double m = max_finite(f);
  return (x * scale).clamp_(-m, m).to(scalar_type(f));
}

// One scale per row of x (fp32, [r, c]), from the rows' amax [r] (its own when undefined).
Float8Tensor cast_rows(const at::Tensor& x, Format f, bool power_of_2, at::Tensor amax = at::Tensor()) {
  if (!amax.defined()) amax = x.abs().amax(1);
  const at::Tensor scale = scale_from_amax(amax, f, power_of_2);
  return {saturating_cast(x, scale.unsqueeze(1), f).contiguous(), scale.reciprocal(), amax};
}

int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

// x (fp32, [r, c]) in blocks of `block_rows` x kBlock values, each scaled by
// its own amax (zero padding at the edges: it moves no amax).
Float8Tensor cast_blocks(const at::Tensor& x, int64_t block_rows, Format f, bool power_of_2) {
  const int64_t r = x.size(0), c = x.size(1);
  const int64_t rb = blocks_of(r, block_rows), cb = blocks_of(c, kBlock);
  const at::Tensor padded = at::constant_pad_nd(x, {0, cb * kBlock - c, 0, rb * block_rows - r});
  const at::Tensor blocks = padded.view({rb, block_rows, cb, kBlock});
  const at::Tensor amax = blocks.abs().amax({1, 3});  // [rb, cb]
  const at::Tensor scale = scale_from_amax(amax, f, power_of_2);
  const at::Tensor data = saturating_cast(blocks, scale.view({rb, 1, cb, 1}), f)
                              .view({rb * block_rows, cb * kBlock})
                              .narrow(0, 0, r)
                              .narrow(1, 0, c)
                              .contiguous();
  return {data, scale.reciprocal(), amax};
}

Float8Pair cast_blockwise(const at::Tensor& x, const CastSpec& spec, bool with_transposed) {
  Float8Pair out;
  if (spec.scaling == Scaling::blocks_1x128) {
    out.rows = cast_blocks(x, 1, spec.format, spec.power_of_2);
    if (with_transposed) out.transposed = cast_blocks(x.t().contiguous(), 1, spec.format, spec.power_of_2);
    return out;
  }
  out.rows = cast_blocks(x, kBlock, spec.format, spec.power_of_2);
  // A square block transposed is a block of the transposed matrix: the same bytes and scales.
  if (with_transposed)
    out.transposed = {out.rows.data.t().contiguous(), out.rows.scale_inv.t().contiguous(),
                      out.rows.amax.t().contiguous()};
  return out;
}

// A shard's amax reduced over its group: Inf and NaN enter as Inf (a max
// over NaN is not defined alike by every backend), so all ranks see it.
at::Tensor reduced(at::Tensor amax, const AmaxReducer& max_over_group) {
  amax = at::nan_to_num(amax.to(at::kFloat), std::numeric_limits<double>::infinity()).contiguous();
  max_over_group(amax);
  return amax;
}

#ifdef STRATUM_WITH_CUDA_KERNELS
bool kernel_ok(const at::Tensor& x2d) {
  return nn::cuda::use_kernels({&x2d}) && x2d.size(0) > 0 && x2d.size(1) > 0;
}

// `max_over_group` (tensorwise only; may be null): reduces the amax between its pass and the cast's.
// `known_amax` (tensorwise only; may be undefined): x2d's amax from the kernel that wrote it, no amax pass.
Float8Pair cast_kernel(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed,
                       const AmaxReducer& max_over_group = nullptr, const at::Tensor& known_amax = at::Tensor()) {
  namespace k = stratum::nn::float8::cuda;
  c10::cuda::CUDAGuard guard(x2d.device());
  const int64_t r = x2d.size(0), c = x2d.size(1);
  const at::TensorOptions f32 = x2d.options().dtype(at::kFloat);
  const at::TensorOptions fp8 = x2d.options().dtype(scalar_type(spec.format));
  const k::Fp8 fmt = spec.format == Format::e4m3 ? k::Fp8::e4m3 : k::Fp8::e5m2;
  const auto in = nn::cuda::dtype_of(x2d);
  Float8Pair out;
  if (spec.scaling == Scaling::tensorwise) {
    // Two passes: the amax needs the whole tensor before any value is scaled.
    at::Tensor amax = known_amax.defined() ? known_amax : at::zeros({}, f32);
    at::Tensor scale_inv = at::empty({}, f32);
    if (!known_amax.defined())
      stratum::cuda::check_launch(
          k::launch_amax(x2d.const_data_ptr(), in, r * c, amax.data_ptr<float>(), nn::cuda::current_stream()),
          "fp8 cast kernel: amax");
    if (max_over_group) amax = reduced(amax, max_over_group);
    at::Tensor data = at::empty({r, c}, fp8);
    at::Tensor data_t = with_transposed ? at::empty({c, r}, fp8) : at::Tensor();
    stratum::cuda::check_launch(k::launch_cast_tensorwise(x2d.const_data_ptr(), in, r, c, amax.const_data_ptr<float>(), fmt,
                                                 spec.power_of_2, scale_inv.data_ptr<float>(), data.data_ptr(),
                                                 with_transposed ? data_t.data_ptr() : nullptr,
                                                 nn::cuda::current_stream()),
                       "fp8 cast kernel: tensorwise cast");
    out.rows = {data, scale_inv, amax};
    if (with_transposed) out.transposed = {data_t, scale_inv, amax};
    return out;
  }
  at::Tensor amax = at::empty({r}, f32), scale_inv = at::empty({r}, f32), data = at::empty({r, c}, fp8);
  stratum::cuda::check_launch(k::launch_cast_rowwise(x2d.const_data_ptr(), in, r, c, fmt, spec.power_of_2, data.data_ptr(),
                                            scale_inv.data_ptr<float>(), amax.data_ptr<float>(),
                                            nn::cuda::current_stream()),
                     "fp8 cast kernel: rowwise cast");
  out.rows = {data, scale_inv, amax};
  if (with_transposed) {
    at::Tensor amax_t = at::zeros({c}, f32), scale_inv_t = at::empty({c}, f32), data_t = at::empty({c, r}, fp8);
    stratum::cuda::check_launch(k::launch_cast_columnwise_transposed(x2d.const_data_ptr(), in, r, c, fmt, spec.power_of_2,
                                                            data_t.data_ptr(), scale_inv_t.data_ptr<float>(),
                                                            amax_t.data_ptr<float>(), nn::cuda::current_stream()),
                       "fp8 cast kernel: columnwise transposed cast");
    out.transposed = {data_t, scale_inv_t, amax_t};
  }
  return out;
}

// 1x128 blocks along the rows, and the transposed copy's along x2d's columns.
Float8Pair cast_blocks_kernel(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed) {
  namespace k = stratum::nn::float8::cuda;
  c10::cuda::CUDAGuard guard(x2d.device());
  const int64_t r = x2d.size(0), c = x2d.size(1);
  const int64_t rb = (r + kBlock - 1) / kBlock, cb = (c + kBlock - 1) / kBlock;
  const at::TensorOptions f32 = x2d.options().dtype(at::kFloat);
  const at::TensorOptions fp8 = x2d.options().dtype(scalar_type(spec.format));
  const k::Fp8 fmt = spec.format == Format::e4m3 ? k::Fp8::e4m3 : k::Fp8::e5m2;
  const auto in = nn::cuda::dtype_of(x2d);
  Float8Pair out;
  out.rows = {at::empty({r, c}, fp8), at::empty({r, cb}, f32), at::empty({r, cb}, f32)};
  stratum::cuda::check_launch(
      k::launch_cast_blocks_1x128(x2d.const_data_ptr(), in, r, c, fmt, spec.power_of_2, out.rows.data.data_ptr(),
                                  out.rows.scale_inv.data_ptr<float>(), out.rows.amax.data_ptr<float>(),
                                  nn::cuda::current_stream()),
      "fp8 cast kernel: 1x128 blocks");
  if (with_transposed) {
    out.transposed = {at::empty({c, r}, fp8), at::empty({c, rb}, f32), at::empty({c, rb}, f32)};
    stratum::cuda::check_launch(
        k::launch_cast_blocks_1x128_transposed(x2d.const_data_ptr(), in, r, c, fmt, spec.power_of_2,
                                               out.transposed.data.data_ptr(),
                                               out.transposed.scale_inv.data_ptr<float>(),
                                               out.transposed.amax.data_ptr<float>(), nn::cuda::current_stream()),
        "fp8 cast kernel: 1x128 blocks, transposed");
  }
  return out;
}
#endif

}  // namespace

bool is_blockwise(Scaling s) { return s == Scaling::blocks_1x128 || s == Scaling::blocks_128x128; }

Scaling block_scaling(const Float8Tensor& t) {
  const at::Tensor& s = t.scale_inv;
  const int64_t r = t.data.size(0), cb = blocks_of(t.data.size(1), kBlock);
  if (s.dim() == 2 && s.size(1) == cb) {
    if (s.size(0) == r) return Scaling::blocks_1x128;
    if (s.size(0) == blocks_of(r, kBlock)) return Scaling::blocks_128x128;
  }
  throw Error("fp8: scales " + c10::str(s.sizes()) + " are not 1x128 or 128x128 blocks of a " +
              c10::str(t.data.sizes()) + " matrix");
}

Float8Pair cast_reference(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed) {
  check_input(x2d);
  const at::Tensor x = x2d.to(at::kFloat);
  if (is_blockwise(spec.scaling)) return cast_blockwise(x, spec, with_transposed);
  Float8Pair out;
  if (spec.scaling == Scaling::rowwise) {
    out.rows = cast_rows(x, spec.format, spec.power_of_2);
    if (with_transposed) out.transposed = cast_rows(x.t().contiguous(), spec.format, spec.power_of_2);
    return out;
  }
  const at::Tensor amax = x.abs().amax();
  const at::Tensor scale = scale_from_amax(amax, spec.format, spec.power_of_2);
  const at::Tensor scale_inv = scale.reciprocal();
  const at::Tensor data = saturating_cast(x, scale, spec.format);
  out.rows = {data.contiguous(), scale_inv, amax};
  // The transposed copy of the FP8 values: the same bytes, so exact.
  if (with_transposed) out.transposed = {data.t().contiguous(), scale_inv, amax};
  return out;
}

Float8Pair cast(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed) {
  check_input(x2d);
#ifdef STRATUM_WITH_CUDA_KERNELS
  // 1x128 blocks (activations and gradients, cast at every GEMM) have
  // kernels; 128x128 ones (weights, cast once a step) the ATen composition.
  if (kernel_ok(x2d) && spec.scaling == Scaling::blocks_1x128) return cast_blocks_kernel(x2d, spec, with_transposed);
  if (kernel_ok(x2d) && !is_blockwise(spec.scaling)) return cast_kernel(x2d, spec, with_transposed);
#endif
  return cast_reference(x2d, spec, with_transposed);
}

Float8Pair cast_shard(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed, int split_dim,
                      const AmaxReducer& max_over_group, const at::Tensor& known_amax) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (known_amax.defined() && spec.scaling == Scaling::tensorwise && kernel_ok(x2d)) {
    check_input(x2d);
    if (known_amax.dim() != 0 || known_amax.scalar_type() != at::kFloat || known_amax.device() != x2d.device())
      throw Error("fp8 cast: a known amax must be a 0-dim fp32 tensor on the operand's device, got " +
                  c10::str(known_amax.sizes()) + " " + c10::toString(known_amax.scalar_type()));
    return cast_kernel(x2d, spec, with_transposed, split_dim < 0 ? nullptr : max_over_group, known_amax);
  }
#endif
  if (split_dim < 0 || !max_over_group) return cast(x2d, spec, with_transposed);
  check_input(x2d);
  if (split_dim > 1) throw Error("fp8 cast: a matrix has no dimension " + std::to_string(split_dim) + " to split");
  if (is_blockwise(spec.scaling)) {
    // No block may span the split: the shard's blocks are then the whole matrix's.
    const bool blocks_run_along = split_dim == 1 || spec.scaling == Scaling::blocks_128x128 || with_transposed;
    if (blocks_run_along && x2d.size(split_dim) % kBlock != 0)
      throw Error("fp8 blockwise cast: a shard " + std::to_string(x2d.size(split_dim)) + " " +
                  (split_dim == 0 ? "rows" : "columns") + " wide of a matrix split over the tensor-parallel group; "
                  "blockwise scales need shards of whole 128-wide blocks (hidden and FFN widths divided by the "
                  "tensor-parallel size must be multiples of 128)");
    return cast(x2d, spec, with_transposed);
  }
  if (spec.scaling == Scaling::tensorwise) {
#ifdef STRATUM_WITH_CUDA_KERNELS
    if (kernel_ok(x2d)) return cast_kernel(x2d, spec, with_transposed, max_over_group);
#endif
    // As cast_reference, from the group's amax.
    const at::Tensor x = x2d.to(at::kFloat);
    const at::Tensor amax = reduced(x.abs().amax(), max_over_group);
    const at::Tensor scale = scale_from_amax(amax, spec.format, spec.power_of_2);
    const at::Tensor data = saturating_cast(x, scale, spec.format);
    Float8Pair out;
    out.rows = {data.contiguous(), scale.reciprocal(), amax};
    if (with_transposed) out.transposed = {data.t().contiguous(), out.rows.scale_inv, amax};
    return out;
  }
  // Rowwise: the rows' amax spans the columns, the transposed copy's the rows.
  const at::Tensor x = x2d.to(at::kFloat);
  at::Tensor row_amax = x.abs().amax(1);
  if (split_dim == 1) row_amax = reduced(row_amax, max_over_group);
  Float8Pair out;
  out.rows = cast_rows(x, spec.format, spec.power_of_2, row_amax);
  if (with_transposed) {
    at::Tensor column_amax = x.abs().amax(0);
    if (split_dim == 0) column_amax = reduced(column_amax, max_over_group);
    out.transposed = cast_rows(x.t().contiguous(), spec.format, spec.power_of_2, column_amax);
  }
  return out;
}

Float8Tensor cast_with_amax(const at::Tensor& x2d, const at::Tensor& amax, const CastSpec& spec,
                            const at::Tensor& out) {
  check_input(x2d);
  const at::ScalarType fp8 = scalar_type(spec.format);
  if (out.defined() && (out.numel() != x2d.numel() || !out.is_contiguous() || out.element_size() != 1 ||
                        out.device() != x2d.device()))
    throw Error("fp8 cast: the output must be a contiguous 1-byte tensor of the values' size and device");
  const at::Tensor data = out.defined() ? out.view(fp8).view(x2d.sizes()) : at::Tensor();
  if (spec.scaling != Scaling::tensorwise) throw Error("fp8 cast: a given amax scales a whole tensor (tensorwise)");
  if (!amax.defined() || amax.dim() != 0 || amax.scalar_type() != at::kFloat || amax.device() != x2d.device())
    throw Error("fp8 cast: the amax must be a 0-dim fp32 tensor on the values' device");
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (kernel_ok(x2d)) {
    namespace k = stratum::nn::float8::cuda;
    c10::cuda::CUDAGuard guard(x2d.device());
    at::Tensor scale_inv = at::empty({}, amax.options());
    const at::Tensor written = data.defined() ? data : at::empty(x2d.sizes(), x2d.options().dtype(fp8));
    stratum::cuda::check_launch(
        k::launch_cast_tensorwise(x2d.const_data_ptr(), nn::cuda::dtype_of(x2d), x2d.size(0), x2d.size(1),
                                  amax.const_data_ptr<float>(), spec.format == Format::e4m3 ? k::Fp8::e4m3 : k::Fp8::e5m2,
                                  spec.power_of_2, scale_inv.data_ptr<float>(), written.data_ptr(), nullptr,
                                  nn::cuda::current_stream()),
        "fp8 cast kernel: tensorwise cast with a given amax");
    return {written, scale_inv, amax};
  }
#endif
  const at::Tensor scale = scale_from_amax(amax, spec.format, spec.power_of_2);
  const at::Tensor cast_values = saturating_cast(x2d.to(at::kFloat), scale, spec.format).contiguous();
  if (data.defined()) data.copy_(cast_values);
  return {data.defined() ? data : cast_values, scale.reciprocal(), amax};
}

Float8Tensor cast_with_scale(const at::Tensor& x2d, const at::Tensor& scale, Format f) {
  check_input(x2d);
  const at::Tensor s = scale.to(at::kFloat);
  const at::Tensor x = x2d.to(at::kFloat);
  const at::Tensor amax = s.dim() == 0 ? x.abs().amax() : x.abs().amax(1);
  return {saturating_cast(x, s.dim() == 0 ? s : s.unsqueeze(1), f).contiguous(), s.reciprocal(), amax};
}

at::Tensor dequantize(const Float8Tensor& t) {
  const at::Tensor v = t.data.to(at::kFloat);
  if (t.scale_inv.dim() == 2) {
    // Blocks: each scale repeated over its block, the edges cut.
    const int64_t block_rows = block_scaling(t) == Scaling::blocks_1x128 ? 1 : kBlock;
    const at::Tensor s = t.scale_inv.repeat_interleave(block_rows, 0)
                             .repeat_interleave(kBlock, 1)
                             .narrow(0, 0, v.size(0))
                             .narrow(1, 0, v.size(1));
    return v * s;
  }
  return t.scale_inv.dim() == 0 ? v * t.scale_inv : v * t.scale_inv.unsqueeze(1);
}

}  // namespace stratum::nn::float8
