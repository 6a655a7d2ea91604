// One pass of Adam/AdamW over flat buffers for mixed-precision training: reads
// the 16-bit (or fp32) gradient, updates the fp32 master and moments, and
// writes the master rounded to the model's dtype. torch's fused Adam needs the
// gradient widened to fp32 first and the parameters cast back after: three
// passes and a 4-byte write of the unscaled gradient more. The arithmetic
// follows torch's _fused_adam(w) (fp32, same order) so the two agree to rounding.
#include "stratum/optim/mixed_adam_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "stratum/core/cuda_float_convert.cuh"
#include "stratum/core/cuda_kernel_util.cuh"

namespace stratum::optim::cuda {
namespace {

using cuda_detail::aligned_to;
using cuda_detail::capped_grid;
using cuda_detail::Elems;
using cuda_detail::narrow_to;
using cuda_detail::widen;

struct Coefficients {
  float lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt, grad_scale;
  bool decoupled, scaled;
};

__device__ __forceinline__ void update(const Coefficients& c, float& p, float& m, float& v, float g) {
  if (c.scaled) g /= c.grad_scale;
  if (c.weight_decay != 0.f) {
    if (c.decoupled) p -= c.lr * c.weight_decay * p;
    else g += c.weight_decay * p;
  }
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  const float denom = sqrtf(v) / c.bias_correction2_sqrt + c.eps;
  p -= c.step_size * m / denom;
}

__device__ Coefficients coefficients(const MixedAdamArgs& a) {
  Coefficients c;
  c.lr = a.lr;
  c.beta1 = a.beta1;
  c.beta2 = a.beta2;
  c.eps = a.eps;
  c.weight_decay = a.weight_decay;
  c.decoupled = a.decoupled;
  const float step = *a.step;
  c.step_size = a.bias_correction ? a.lr / (1.f - powf(a.beta1, step)) : a.lr;
  c.bias_correction2_sqrt = a.bias_correction ? sqrtf(1.f - powf(a.beta2, step)) : 1.f;
  c.scaled = a.grad_scale != nullptr;
  c.grad_scale = c.scaled ? *a.grad_scale : 1.f;
  return c;
}

// Quad q (four consecutive elements, one memory access: 16 bytes of fp32, 8
// of a 16-bit type) in fp32; the launcher checks that the pointers are aligned to it.
template <typename T>
__device__ __forceinline__ void load4(const T* p, int64_t q, float (&out)[4]) {
  const Elems<T, 4> e = cuda_detail::load<T, 4>(p + 4 * q);
  for (int k = 0; k < 4; ++k) out[k] = widen<T>(e.v[k]);
}

template <typename T>
__device__ __forceinline__ void store4(T* p, int64_t q, const float (&in)[4]) {
  Elems<T, 4> e;
  for (int k = 0; k < 4; ++k) e.v[k] = narrow_to<T>(in[k]);
  cuda_detail::store<T, 4>(p + 4 * q, e);
}

// Four elements a thread per iteration, every buffer read and written in
// quads (the launcher checks alignment and n % 4 == 0).
template <typename G, typename P>
__global__ void __launch_bounds__(256) mixed_adam_vec4(MixedAdamArgs a) {
  const Coefficients c = coefficients(a);
  const G* grad = static_cast<const G*>(a.grad);
  P* out = static_cast<P*>(a.params16);
  const int64_t quads = a.n / 4;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < quads; q += int64_t{gridDim.x} * blockDim.x) {
    float p[4], m[4], v[4], g[4];
    load4(a.master, q, p);
    load4(a.exp_avg, q, m);
    load4(a.exp_avg_sq, q, v);
    load4(grad, q, g);
    for (int k = 0; k < 4; ++k) update(c, p[k], m[k], v[k], g[k]);
    store4(a.master, q, p);
    store4(a.exp_avg, q, m);
    store4(a.exp_avg_sq, q, v);
    if (out) store4(out, q, p);
  }
}

template <typename G, typename P>
__global__ void __launch_bounds__(256) mixed_adam_scalar(MixedAdamArgs a) {
  const Coefficients c = coefficients(a);
  const G* grad = static_cast<const G*>(a.grad);
  P* out = static_cast<P*>(a.params16);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.n; i += int64_t{gridDim.x} * blockDim.x) {
    float p = a.master[i], m = a.exp_avg[i], v = a.exp_avg_sq[i];
    update(c, p, m, v, widen<G>(grad[i]));
    a.master[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    if (out) out[i] = narrow_to<P>(p);
  }
}

template <typename G, typename P>
cudaError_t launch(const MixedAdamArgs& a, cudaStream_t stream) {
  const bool vec = a.n % 4 == 0 && aligned_to(a.master, 16) && aligned_to(a.exp_avg, 16) &&
                   aligned_to(a.exp_avg_sq, 16) && aligned_to(a.grad, 4 * sizeof(G)) &&
                   (!a.params16 || aligned_to(a.params16, 4 * sizeof(P)));
  const unsigned blocks = capped_grid(vec ? a.n / 4 : a.n, 256, 8);
  if (vec) mixed_adam_vec4<G, P><<<blocks, 256, 0, stream>>>(a);
  else mixed_adam_scalar<G, P><<<blocks, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename G>
cudaError_t launch_for_grad(const MixedAdamArgs& a, cudaStream_t stream) {
  switch (a.params16_dtype) {
    case Dtype::bf16: return launch<G, __nv_bfloat16>(a, stream);
    case Dtype::f16: return launch<G, __half>(a, stream);
    case Dtype::f32: return launch<G, float>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_mixed_adam(const MixedAdamArgs& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  switch (a.grad_dtype) {
    case Dtype::bf16: return launch_for_grad<__nv_bfloat16>(a, stream);
    case Dtype::f16: return launch_for_grad<__half>(a, stream);
    case Dtype::f32: return launch_for_grad<float>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace stratum::optim::cuda
