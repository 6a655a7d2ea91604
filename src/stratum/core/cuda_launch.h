#pragma once
// What Stratum's CUDA kernels and their host callers share: the tag of the
// floating type a kernel reads or writes, and a failed launch (or CUDA call)
// as a stratum::Error. No torch headers, so the .cu files include it too.
#include <cuda_runtime_api.h>

#include <string>

#include "stratum/core/error.h"

namespace stratum::cuda {

enum class Dtype { f32, bf16, f16 };

// `what` names the operation and the kernel, e.g. "chunked_cross_entropy: forward kernel".
inline void check_launch(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(what + ": " + cudaGetErrorString(e));
}

}  // namespace stratum::cuda
