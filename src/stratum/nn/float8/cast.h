#pragma once
// A 16- or 32-bit matrix cast to FP8 with saturation, and its transposed copy:
// the operands of nn/float8/scaled_gemm.h, each contiguous along the GEMM's
// contraction axis. On a GPU with Stratum's kernels one kernel computes the
// amax, the scale, the cast and the transposed copy (cast_cuda.cu); elsewhere
// (and as the tests' oracle) the ATen reference below.
#include <ATen/core/Tensor.h>

#include <functional>

#include "stratum/nn/float8/scaling.h"

namespace stratum::nn::float8 {

// tensorwise: one scale for the whole tensor (its current amax); rowwise: one
// scale a row of the operand as the GEMM reads it (amax over the contraction
// axis), the transposed copy's rows being the original's columns.
// Blockwise (DeepSeek-V3's): one scale a block of kBlock values along the
// contraction axis, 1 row high (blocks_1x128: activations and gradients) or
// kBlock rows high (blocks_128x128: weights); a partial block at an edge is
// scaled by its own values.
enum class Scaling { tensorwise, rowwise, blocks_1x128, blocks_128x128 };
constexpr int64_t kBlock = 128;
bool is_blockwise(Scaling s);

// FP8 values and what multiplies them back: value ~ data * scale_inv.
struct Float8Tensor {
  at::Tensor data;       // [rows, cols], fp8, contiguous
  // fp32: 0-dim (tensorwise), [rows] (rowwise), [rows, ⌈cols/128⌉]
  // (blocks_1x128) or [⌈rows/128⌉, ⌈cols/128⌉] (blocks_128x128), contiguous
  at::Tensor scale_inv;
  at::Tensor amax;       // fp32, the scale's shape: what the scale came from
};

// Which blocks `t`'s scales cover (read from their shape against the data's;
// a single row's blocks are both kinds alike, reported as 1x128). Throws
// naming the shapes when they fit neither.
Scaling block_scaling(const Float8Tensor& t);

// A matrix and its transposed copy in FP8: `rows` is x2d [r, c], `transposed`
// is x2dᵀ [c, r] (undefined unless asked for). Tensorwise: both share one
// scale; rowwise: `rows` is scaled per row of x2d, `transposed` per column;
// blocks_1x128: `transposed` is cast in 1x128 blocks of its own rows (runs
// of 128 rows of x2d); blocks_128x128: the same bytes and block scales,
// transposed.
struct Float8Pair {
  Float8Tensor rows, transposed;
};

struct CastSpec {
  Format format = Format::e4m3;
  Scaling scaling = Scaling::tensorwise;
  bool power_of_2 = false;  // scales rounded down to powers of two
};

// x2d [r, c] (bf16, fp16 or fp32) in FP8; with `with_transposed` also x2dᵀ.
// Saturating: |x * scale| beyond the format's largest finite value is
// clamped to it (an amax exactly on the edge; a NaN stays NaN).
Float8Pair cast(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed);

// Replaces `amax` (fp32, on the operand's device) by its elementwise max over
// a tensor-parallel group, in place. Every rank of the group calls it for the
// same operands in the same order (a collective).
using AmaxReducer = std::function<void(at::Tensor& amax)>;

// cast() of one shard of a matrix split over a group along `split_dim` of x2d
// (0: its rows, 1: its columns; -1: not split, cast() itself). Wherever an
// amax spans the split dimension (tensorwise: always; rowwise: the rows'
// scales when the columns are split, the transposed copy's when the rows
// are), `max_over_group` reduces it before the scale is taken: the shard is
// cast exactly as its slice of the whole matrix would be. Blockwise scales
// reduce nothing: the shard's split dimension must be whole blocks (a
// multiple of 128 wherever blocks run along it), else an Error says so. An Inf or NaN amax
// goes into the reduction as Inf, so every rank sees it. On a GPU the
// tensorwise cast keeps its kernels (the reduction between the amax and
// the cast); the rowwise one runs the ATen composition.
// `known_amax` (optional): this shard's max |x| already taken by the kernel
// that produced x2d (0-dim fp32 on the device; nn::swiglu's); a tensorwise
// cast on the GPU then skips its own amax pass. Ignored elsewhere.
Float8Pair cast_shard(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed, int split_dim,
                      const AmaxReducer& max_over_group, const at::Tensor& known_amax = at::Tensor());

// x2d cast under the tensorwise scale that `amax` (0-dim fp32, on x2d's
// device) gives: cast()'s second pass alone, for a piece of a matrix whose
// amax was taken over the whole (ZeRO-3 casts each rank's slice of a weight
// so, zero/float8_unit_gather.h). The pieces' bytes are those of the whole
// matrix's cast() (on a GPU its kernel). `spec` must be tensorwise. `out`
// (optional): a contiguous FP8 (or byte) tensor of x2d's size the values are
// written into, and returned as `data`, instead of a new one.
Float8Tensor cast_with_amax(const at::Tensor& x2d, const at::Tensor& amax, const CastSpec& spec,
                            const at::Tensor& out = at::Tensor());

// The ATen composition cast() runs where the kernels do not (CPU, builds
// without CUDA kernels); the kernels' tests compare against it.
Float8Pair cast_reference(const at::Tensor& x2d, const CastSpec& spec, bool with_transposed);

// x2d scaled by a given `scale` (0-dim, or [rows] for rowwise) with
// saturation: what a scale from another tensor's or an earlier step's amax
// (delayed scaling) would meet; the reference's last step.
Float8Tensor cast_with_scale(const at::Tensor& x2d, const at::Tensor& scale, Format f);

// The FP8 values back in fp32 (data * scale_inv, scales broadcast per row).
at::Tensor dequantize(const Float8Tensor& t);

}  // namespace stratum::nn::float8
