#pragma once
// The CRC-32C of a tensor's bytes (as a checkpoint stores them), computed in
// parallel chunks on torch's threads and folded with crc32c_combine: a save
// pays a small fraction of its write time for it.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace stratum::io {

// `tensor` on the CPU (made contiguous if it is not).
uint32_t tensor_crc32c(const at::Tensor& tensor);

}  // namespace stratum::io
