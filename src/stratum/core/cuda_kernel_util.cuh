#pragma once
// What Stratum's memory-bound kernels share (nvcc only): N consecutive
// elements moved as one aligned access, a warp's sum, a block's largest value, and the
// grid of a grid-stride loop capped at a multiple of the device's SM count
// (queried once per device, not at every launch).
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace stratum::cuda_detail {

// N consecutive elements loaded or stored in one access (the caller checks
// that the address is aligned to sizeof(T) * N).
template <typename T, int N>
struct alignas(sizeof(T) * N) Elems {
  T v[N];
};
template <typename T, int N>
__device__ __forceinline__ Elems<T, N> load(const T* p) {
  return *reinterpret_cast<const Elems<T, N>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void store(T* p, const Elems<T, N>& e) {
  *reinterpret_cast<Elems<T, N>*>(p) = e;
}

// The sum of `v` over the warp, in every lane.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The block's largest `v` (every thread calls it; thread 0 holds the
// result). Blocks of a multiple of 32 threads; a caller that calls it again
// synchronizes the block first (the scratch is reused). For amaxes: |x|'s
// float bits order as the values do, NaN above Inf.
__device__ __forceinline__ int block_max(int v) {
  __shared__ int partial[32];
  for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0;
    for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// Elements per 16-byte access.
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The current device's SM count, cached per device.
inline int sm_count() {
  constexpr int kDevices = 64;
  static std::atomic<int> cached[kDevices] = {};
  int device = 0;
  cudaGetDevice(&device);
  int sms = device >= 0 && device < kDevices ? cached[device].load(std::memory_order_relaxed) : 0;
  if (sms > 0) return sms;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) sms = 132;
  if (device >= 0 && device < kDevices) cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

// Blocks for a grid-stride loop over `work` items, `per_block` items a block
// per pass: enough to cover the work, at most `blocks_per_sm` per SM, at least one.
inline unsigned capped_grid(int64_t work, int64_t per_block, int blocks_per_sm) {
  const int64_t wanted = (work + per_block - 1) / per_block, cap = int64_t{sm_count()} * blocks_per_sm;
  return static_cast<unsigned>(wanted < 1 ? 1 : wanted < cap ? wanted : cap);
}

}  // namespace stratum::cuda_detail
