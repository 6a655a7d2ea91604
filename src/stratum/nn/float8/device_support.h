#pragma once
// Where FP8 training can run: a CUDA GPU of compute capability >= 8.9
// (Ada, Hopper and later: FP8 tensor cores, cuBLASLt's FP8 GEMMs).
#include <c10/core/Device.h>

#include <string>

namespace stratum::nn::float8 {

// Why FP8 GEMMs cannot train on `device` (empty: they can). `blockwise`:
// with 1x128 / 128x128 block scales, which cuBLASLt runs on Hopper (compute
// capability 9.x) only.
std::string unsupported_reason(c10::Device device, bool blockwise = false);

}  // namespace stratum::nn::float8
