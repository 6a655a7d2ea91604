#pragma once
// 4-bit NormalFloat (NF4) weights as bitsandbytes stores them (QLoRA,
// Dettmers et al. 2023). A weight is cut into blocks of `blocksize` values
// (64) in row-major order; each block is scaled by its absolute maximum and
// each value becomes the index of the nearest of NF4's 16 normal quantiles,
// two to a byte, the first in the high nibble. Double quantization stores the
// blocks' absmax in 8 bits too: less their mean, in blocks of 256 scaled by
// their own absmax, as indices into bitsandbytes' signed dynamic map.
//
// quantize_nf4 writes bit for bit what bitsandbytes' CPU quantize_4bit(...,
// quant_type="nf4", compress_statistics=True) writes (tests/quant/ holds a
// file the package wrote); nf4_from_bitsandbytes reads a weight of a
// bitsandbytes-quantized Hugging Face checkpoint (QuantState.as_dict(packed=True)).
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace stratum::quant {

struct Nf4Tensor {
  at::Tensor packed;  // uint8 [ceil(numel / 2)]: value 2k in the high nibble of byte k
  // Per block: fp32, or uint8 indices into dynamic_map() under double quantization.
  at::Tensor absmax;
  int64_t blocksize = 64;
  std::vector<int64_t> shape;            // of the weight quantized
  at::ScalarType dtype = at::kBFloat16;  // of the weight quantized, and of its dequantization
  // Double quantization: block b's absmax is
  // nested_code[absmax[b]] * nested_absmax[b / nested_blocksize] + offset.
  bool nested = false;
  at::Tensor nested_absmax;  // fp32 [ceil(blocks / nested_blocksize)]
  at::Tensor nested_code;    // 256 fp32: dynamic_map() (a checkpoint's own nested_quant_map when read)
  float offset = 0.0f;
  int64_t nested_blocksize = 256;

  int64_t numel() const;
  int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
  // Bytes held: packed values and the blocks' scales.
  int64_t nbytes() const;
};

// NF4's 16 values in [-1, 1], sorted (bitsandbytes' get_4bit_type("nf4")).
const std::array<float, 16>& nf4_code();
// bitsandbytes' create_dynamic_map(signed=True): 256 fp32 values in [-1, 1], sorted.
const at::Tensor& dynamic_map();

// `weight` (fp32, bf16 or fp16, any shape) in NF4. blocksize: 32 to 4096, a power of two.
Nf4Tensor quantize_nf4(const at::Tensor& weight, int64_t blocksize = 64, bool double_quant = true);
// Each block's absmax in fp32 (the double quantization undone).
at::Tensor nf4_absmax(const Nf4Tensor& q);
// The weight back, [shape] in dtype (each value its code times its block's absmax, in fp32, then rounded).
at::Tensor dequantize_nf4(const Nf4Tensor& q);

// bitsandbytes' 8-bit blockwise quantization on the CPU (quantize_blockwise):
// each block of `values` (fp32) scaled by its absmax, each value the index of
// its nearest entry of `code` (256 sorted fp32 values) through bitsandbytes'
// 65,536-step table. Returns (uint8 indices, fp32 absmax per block).
std::pair<at::Tensor, at::Tensor> quantize_blockwise_8bit(const at::Tensor& values, const at::Tensor& code,
                                                          int64_t blocksize);

// A weight of a bitsandbytes-quantized checkpoint: `name` (packed uint8) and
// `name`.absmax, .quant_map, .quant_state.bitsandbytes__nf4 (its JSON:
// quant_type, blocksize, dtype, shape, nested_offset), and under double
// quantization .nested_absmax and .nested_quant_map. `get` returns a tensor
// by name, undefined when absent. `source` names the file in errors; every
// inconsistency (another quant type, a code book that is not NF4's, sizes
// that do not match the shape) is refused naming the tensor.
Nf4Tensor nf4_from_bitsandbytes(const std::string& name, const std::function<at::Tensor(const std::string&)>& get,
                                const std::string& source);

}  // namespace stratum::quant
