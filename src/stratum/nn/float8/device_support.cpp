#include "stratum/nn/float8/device_support.h"

#ifdef STRATUM_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace stratum::nn::float8 {

std::string unsupported_reason(c10::Device device, bool blockwise) {
  if (!device.is_cuda())
    return "training runs on the " + device.str() +
           ", and FP8 GEMMs need a CUDA GPU of compute capability >= 8.9 (Ada, Hopper or later)";
#ifdef STRATUM_WITH_CUDA
  cudaDeviceProp p{};
  const int index = device.has_index() ? device.index() : 0;
  if (cudaError_t e = cudaGetDeviceProperties(&p, index); e != cudaSuccess)
    return "cudaGetDeviceProperties(" + std::to_string(index) + ") failed: " + cudaGetErrorString(e);
  if (p.major * 10 + p.minor < 89)
    return std::string("GPU ") + std::to_string(index) + " (" + p.name + ") has compute capability " +
           std::to_string(p.major) + "." + std::to_string(p.minor) +
           "; FP8 GEMMs need 8.9 or later (Ada, Hopper)";
  if (blockwise && p.major != 9)
    return std::string("GPU ") + std::to_string(index) + " (" + p.name + ") has compute capability " +
           std::to_string(p.major) + "." + std::to_string(p.minor) +
           "; blockwise FP8 scales (recipe \"blockwise\") run on Hopper (9.x) only; use \"tensorwise\" or "
           "\"rowwise\"";
  return "";
#else
  return "this build of Stratum has no CUDA; FP8 GEMMs need a CUDA GPU of compute capability >= 8.9";
#endif
}

}  // namespace stratum::nn::float8
