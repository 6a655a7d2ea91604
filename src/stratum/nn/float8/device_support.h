#pragma once
// Where FP8 training can run: a CUDA GPU of compute capability >= 8.9
// (Ada, Hopper and later: FP8 tensor cores, cuBLASLt's FP8 GEMMs).
#include <c10/core/Device.h>

#include <string>

namespace stratum::nn::float8 {

// Why FP8 GEMMs cannot train on `device` (empty: they can).
std::string unsupported_reason(c10::Device device);

}  // namespace stratum::nn::float8
