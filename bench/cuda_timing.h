// Seconds a call takes on the current CUDA stream, between two events around
// `reps` back-to-back calls after one warm-up: for the bandwidth benchmarks
// (adam_bandwidth.cpp, fp8_cast_bandwidth.cpp). GPU builds only.
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace stratum::bench {

template <typename F>
double seconds_per_call(F&& call, int reps) {
  call();  // warm-up
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, c10::cuda::getCurrentCUDAStream().stream());
  for (int i = 0; i < reps; ++i) call();
  cudaEventRecord(b, c10::cuda::getCurrentCUDAStream().stream());
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / 1e3 / reps;
}

}  // namespace stratum::bench
