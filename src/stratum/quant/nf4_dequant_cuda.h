#pragma once
// NF4 dequantization as one kernel (nf4_dequant_cuda.cu): each thread reads
// 4 packed bytes and its block's scale and writes 8 values in one store.
// ATen's composition (unpack, index, pad, scale, cast) made ~10 passes over
// the weight each GEMM. The same values as quant::dequantize_nf4's CPU path:
// code x absmax in fp32 (the nested absmax as code x scale + offset, each
// rounded apart, no FMA), then rounded to the output dtype. Plain pointers,
// no torch headers, so nvcc compiles only this.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "stratum/core/cuda_launch.h"

namespace stratum::quant::cuda {

using stratum::cuda::Dtype;

struct Nf4View {
  const float* code = nullptr;           // NF4's 16 values, on the device
  const uint8_t* packed = nullptr;      // [ceil(n / 2)], value 2k in byte k's high nibble
  int64_t n = 0;                         // values
  int64_t blocksize = 64;                // a power of two >= 32
  // Not nested: fp32 absmax per block. Nested: uint8 codes per block into
  // nested_code (256 fp32), times nested_absmax[block / nested_blocksize], plus offset.
  const float* absmax = nullptr;
  const uint8_t* absmax_codes = nullptr;
  const float* nested_code = nullptr;
  const float* nested_absmax = nullptr;
  int64_t nested_blocksize = 256;
  float offset = 0.0f;
};

// out[i] (n values of `dtype`) = the weight's value i.
cudaError_t launch_nf4_dequantize(const Nf4View& q, void* out, Dtype dtype, cudaStream_t stream);

}  // namespace stratum::quant::cuda
