#include "stratum/nn/tensor_parallel/shard_spec.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "stratum/core/error.h"

namespace stratum::nn::tp {

std::vector<int64_t> shard_shape(std::vector<int64_t> whole_shape, const ShardSpec& s) {
  if (s.dim < 0 || s.dim >= static_cast<int64_t>(whole_shape.size()))
    throw Error("tensor parallel: no dimension " + std::to_string(s.dim) + " to split");
  const int64_t n = s.padded > 0 ? s.padded : whole_shape[s.dim];
  if (n % (s.blocks * s.parts) != 0)
    throw Error("tensor parallel: dimension " + std::to_string(s.dim) + " of size " + std::to_string(n) +
                " does not split into " + std::to_string(s.blocks) + " blocks of " + std::to_string(s.parts) +
                " pieces");
  whole_shape[s.dim] = n / s.parts;
  return whole_shape;
}

at::Tensor take_shard(const at::Tensor& whole, const ShardSpec& s) {
  // Each block's piece straight from `whole` (rows past its end are padding,
  // zeros): a memory-mapped whole tensor is read only where the piece lies.
  const std::vector<int64_t> out_shape = shard_shape(whole.sizes().vec(), s);
  const int64_t n = std::max(s.padded, whole.size(s.dim));
  const int64_t block = n / s.blocks, piece = block / s.parts;
  std::vector<int64_t> joined = whole.sizes().vec();
  joined[s.dim] = s.blocks * piece;
  at::Tensor out = at::empty(joined, whole.options());
  for (int64_t b = 0; b < s.blocks; ++b) {
    const int64_t first = b * block + s.index * piece;
    const int64_t kept = std::clamp<int64_t>(whole.size(s.dim) - first, 0, piece);
    at::Tensor dst = out.narrow(s.dim, b * piece, piece);
    if (kept > 0) dst.narrow(s.dim, 0, kept).copy_(whole.narrow(s.dim, first, kept));
    if (kept < piece) dst.narrow(s.dim, kept, piece - kept).zero_();
  }
  return out.view(out_shape);
}

std::vector<int64_t> whole_shape(std::vector<int64_t> piece_shape, const ShardSpec& s) {
  if (s.dim < 0 || s.dim >= static_cast<int64_t>(piece_shape.size()))
    throw Error("tensor parallel: no dimension " + std::to_string(s.dim) + " to join");
  piece_shape[s.dim] = s.padded > 0 ? s.unpadded : piece_shape[s.dim] * s.parts;
  return piece_shape;
}

void place_shard(at::Tensor& whole, const at::Tensor& piece, const ShardSpec& s) {
  const int64_t n = s.padded > 0 ? s.padded : whole.size(s.dim);
  const int64_t block = n / s.blocks, width = block / s.parts;
  const at::Tensor p = piece.view(shard_shape(whole.sizes().vec(), s));
  for (int64_t b = 0; b < s.blocks; ++b) {
    const int64_t first = b * block + s.index * width;  // in the padded whole
    const int64_t kept = std::min(width, whole.size(s.dim) - first);
    if (kept > 0) whole.narrow(s.dim, first, kept).copy_(p.narrow(s.dim, b * width, kept));
  }
}

}  // namespace stratum::nn::tp
