#include "stratum/optim/cpu_adam.h"

// The SIMD paths exist on x86-64 only; elsewhere the scalar path runs.
#if defined(__x86_64__)
#define STRATUM_CPU_ADAM_X86 1
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include "stratum/core/error.h"
#include "stratum/optim/cpu_parallel.h"

// Rounding is part of the contract ("torch's Adam up to rounding"): keep GCC
// from fusing a*b + c into an FMA where torch rounds the product first.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#else
#pragma STDC FP_CONTRACT OFF
#endif

namespace stratum::optim {
namespace {

using detail::for_each_block;
using detail::hardware_threads;

// Per-call scalars, already in the precision torch applies them (double math,
// then one rounding to fp32).
struct Coeffs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  float step_size;       // lr / bc1
  float bc2_sqrt;        // sqrt(bc2)
  float grad_scale;      // divide grads by it when unscale
  float decay;           // 1 - lr wd (decoupled)
  float l2;              // wd (L2)
  bool unscale, decoupled_decay, l2_decay;
  bool fp16_copy;        // the 16-bit copy is fp16, else bf16
};

Coeffs make_coeffs(const CpuAdamStep& s, Copy16 format) {
  // Without bias correction (DeepSpeed's bias_correction false) both are 1: the
  // divisions by them below are then exact, so every ISA path stays as it is.
  const double bc1 = s.bias_correction ? 1.0 - std::pow(s.beta1, static_cast<double>(s.step)) : 1.0;
  const double bc2 = s.bias_correction ? 1.0 - std::pow(s.beta2, static_cast<double>(s.step)) : 1.0;
  Coeffs c{};
  c.beta1 = float(s.beta1);
  c.one_minus_beta1 = float(1.0 - s.beta1);
  c.beta2 = float(s.beta2);
  c.one_minus_beta2 = float(1.0 - s.beta2);
  c.eps = float(s.eps);
  c.step_size = float(s.lr / bc1);
  c.bc2_sqrt = float(std::sqrt(bc2));
  c.grad_scale = float(s.grad_scale);
  c.decay = float(1.0 - s.lr * s.weight_decay);
  c.l2 = float(s.weight_decay);
  c.unscale = s.grad_scale != 1.0;
  c.decoupled_decay = s.decoupled && s.weight_decay != 0.0;
  c.l2_decay = !s.decoupled && s.weight_decay != 0.0;
  c.fp16_copy = format == Copy16::fp16;
  return c;
}

// torch's c10::BFloat16 rounding: nearest even; any NaN becomes the quiet NaN 0x7FC0.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- scalar: the reference order of operations, element by element ----------
void adam_scalar(float* p, const float* g, float* m, float* v, int64_t n, const Coeffs& c, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = g[i], param = p[i];
    if (c.unscale) grad = grad / c.grad_scale;
    if (c.decoupled_decay) param = param * c.decay;
    // FMAs where the vector paths (and torch's vectorized add with alpha) have
    // them, so every path rounds alike; glibc's fmaf uses the instruction when the CPU has it.
    if (c.l2_decay) grad = std::fma(param, c.l2, grad);
    const float mi = std::fma(grad, c.one_minus_beta1, m[i] * c.beta1);
    const float vi = v[i] * c.beta2 + c.one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    param = param - c.step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
    p[i] = param;
    if (out) out[i] = c.fp16_copy ? c10::Half(param).x : to_bf16(param);
  }
}

#ifdef STRATUM_CPU_ADAM_X86
// ---- AVX2 + FMA (+ F16C): 8 lanes; the tail goes through the same code on a padded copy ----
__attribute__((target("avx2,fma,f16c"))) inline void adam8(float* p, const float* g, float* m, float* v, const Coeffs& c,
                                                      uint16_t* out) {
  __m256 grad = _mm256_loadu_ps(g), param = _mm256_loadu_ps(p);
  if (c.unscale) grad = _mm256_div_ps(grad, _mm256_set1_ps(c.grad_scale));
  if (c.decoupled_decay) param = _mm256_mul_ps(param, _mm256_set1_ps(c.decay));
  // torch's add(alpha) is an FMA in its vectorized kernels.
  if (c.l2_decay) grad = _mm256_fmadd_ps(param, _mm256_set1_ps(c.l2), grad);
  const __m256 mi =
      _mm256_fmadd_ps(grad, _mm256_set1_ps(c.one_minus_beta1), _mm256_mul_ps(_mm256_loadu_ps(m), _mm256_set1_ps(c.beta1)));
  const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v), _mm256_set1_ps(c.beta2)),
                                  _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(c.one_minus_beta2), grad), grad));
  const __m256 denom =
      _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), _mm256_set1_ps(c.bc2_sqrt)), _mm256_set1_ps(c.eps));
  param = _mm256_sub_ps(param, _mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(c.step_size), mi), denom));
  _mm256_storeu_ps(m, mi);
  _mm256_storeu_ps(v, vi);
  _mm256_storeu_ps(p, param);
  if (out && c.fp16_copy) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(param, _MM_FROUND_TO_NEAREST_INT));
  } else if (out) {
    const __m256i u = _mm256_castps_si256(param);
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(param, param, _CMP_UNORD_Q)));
    // packus works per 128-bit lane: [r0..3 r0..3 | r4..7 r4..7]; gather qwords 0 and 2.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0b1000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
  }
}

__attribute__((target("avx2,fma,f16c"))) void adam_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                                   const Coeffs& c, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) adam8(p + i, g + i, m + i, v + i, c, out ? out + i : nullptr);
  if (i == n) return;
  const int64_t rest = n - i;
  float tp[8] = {}, tg[8] = {}, tm[8] = {}, tv[8] = {};
  uint16_t to[8];
  std::memcpy(tp, p + i, rest * sizeof(float));
  std::memcpy(tg, g + i, rest * sizeof(float));
  std::memcpy(tm, m + i, rest * sizeof(float));
  std::memcpy(tv, v + i, rest * sizeof(float));
  adam8(tp, tg, tm, tv, c, out ? to : nullptr);
  std::memcpy(p + i, tp, rest * sizeof(float));
  std::memcpy(m + i, tm, rest * sizeof(float));
  std::memcpy(v + i, tv, rest * sizeof(float));
  if (out) std::memcpy(out + i, to, rest * sizeof(uint16_t));
}

// ---- AVX-512F: 16 lanes, masked loads and stores for the tail ----------------
__attribute__((target("avx512f"))) void adam_avx512(float* p, const float* g, float* m, float* v, int64_t n,
                                                    const Coeffs& c, uint16_t* out) {
  const __m512 beta1 = _mm512_set1_ps(c.beta1), one_minus_beta1 = _mm512_set1_ps(c.one_minus_beta1),
               beta2 = _mm512_set1_ps(c.beta2), one_minus_beta2 = _mm512_set1_ps(c.one_minus_beta2),
               eps = _mm512_set1_ps(c.eps), step_size = _mm512_set1_ps(c.step_size),
               bc2_sqrt = _mm512_set1_ps(c.bc2_sqrt), grad_scale = _mm512_set1_ps(c.grad_scale),
               decay = _mm512_set1_ps(c.decay), l2 = _mm512_set1_ps(c.l2);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 grad = _mm512_maskz_loadu_ps(k, g + i), param = _mm512_maskz_loadu_ps(k, p + i);
    if (c.unscale) grad = _mm512_div_ps(grad, grad_scale);
    if (c.decoupled_decay) param = _mm512_mul_ps(param, decay);
    if (c.l2_decay) grad = _mm512_fmadd_ps(param, l2, grad);
    const __m512 mi = _mm512_fmadd_ps(grad, one_minus_beta1, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, m + i), beta1));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), beta2),
                                    _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, grad), grad));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2_sqrt), eps);
    param = _mm512_sub_ps(param, _mm512_div_ps(_mm512_mul_ps(step_size, mi), denom));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    _mm512_mask_storeu_ps(p + i, k, param);
    if (out && c.fp16_copy) {
      const __m256i h = _mm512_cvtps_ph(param, _MM_FROUND_TO_NEAREST_INT);
      if (k == 0xFFFF) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
      } else {  // a masked 16-bit store would need AVX512BW
        uint16_t tail[16];
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail), h);
        std::memcpy(out + i, tail, (n - i) * sizeof(uint16_t));
      }
    } else if (out) {
      const __m512i u = _mm512_castps_si512(param);
      const __m512i bias =
          _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
      r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(param, param, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
      _mm512_mask_cvtepi32_storeu_epi16(out + i, k, r);
    }
  }
}

#endif  // STRATUM_CPU_ADAM_X86

bool cpu_has(CpuAdamIsa isa) {
  switch (isa) {
#ifdef STRATUM_CPU_ADAM_X86
    case CpuAdamIsa::avx512: return __builtin_cpu_supports("avx512f");
    case CpuAdamIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    case CpuAdamIsa::avx512:
    case CpuAdamIsa::avx2: return false;
#endif
    case CpuAdamIsa::scalar: return true;
  }
  return false;
}

using Kernel = void (*)(float*, const float*, float*, float*, int64_t, const Coeffs&, uint16_t*);
Kernel kernel_for(CpuAdamIsa isa) {
#ifdef STRATUM_CPU_ADAM_X86
  if (isa == CpuAdamIsa::avx512) return adam_avx512;
  if (isa == CpuAdamIsa::avx2) return adam_avx2;
#endif
  (void)isa;
  return adam_scalar;
}

// Blocks of 64K floats (256 KiB per buffer): threads take whole blocks, so
// each starts 64-byte aligned (when the buffers are) and small inputs stay on one thread.
constexpr int64_t kBlock = 64 * 1024;

void check_tensor(const at::Tensor& t, const char* what, at::ScalarType dtype, int64_t numel) {
  std::string problem;
  if (!t.defined())
    problem = "is undefined";
  else if (!t.device().is_cpu())
    problem = "is on " + t.device().str() + ", not the CPU";
  else if (t.scalar_type() != dtype)
    problem = std::string("is ") + c10::toString(t.scalar_type()) + ", not " + c10::toString(dtype);
  else if (!t.is_contiguous())
    problem = "is not contiguous";
  else if (numel >= 0 && t.numel() != numel)
    problem = "has " + std::to_string(t.numel()) + " elements, params have " + std::to_string(numel);
  if (!problem.empty()) throw Error(std::string("cpu_adam_step: ") + what + " " + problem);
}

}  // namespace

namespace detail {

int hardware_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

c10::ThreadPool& worker_pool() {
  static c10::ThreadPool pool(std::max(1, hardware_threads() - 1));
  return pool;
}

}  // namespace detail

const char* isa_name(CpuAdamIsa isa) {
  switch (isa) {
    case CpuAdamIsa::scalar: return "scalar";
    case CpuAdamIsa::avx2: return "avx2";
    case CpuAdamIsa::avx512: return "avx512";
  }
  return "?";
}

CpuAdamIsa cpu_adam_isa() {
  const char* forced = std::getenv("STRATUM_CPU_ADAM_ISA");
  if (forced == nullptr || *forced == '\0') {
    if (cpu_has(CpuAdamIsa::avx512)) return CpuAdamIsa::avx512;
    if (cpu_has(CpuAdamIsa::avx2)) return CpuAdamIsa::avx2;
    return CpuAdamIsa::scalar;
  }
  for (CpuAdamIsa isa : {CpuAdamIsa::scalar, CpuAdamIsa::avx2, CpuAdamIsa::avx512}) {
    if (std::strcmp(forced, isa_name(isa)) != 0) continue;
    if (!cpu_has(isa))
      throw Error(std::string("STRATUM_CPU_ADAM_ISA=") + forced + ": this CPU does not support it" +
                  (isa == CpuAdamIsa::avx2 ? " (needs AVX2, FMA and F16C)" : " (needs AVX-512F)"));
    return isa;
  }
  throw Error(std::string("STRATUM_CPU_ADAM_ISA=") + forced + ": unknown; use scalar, avx2 or avx512");
}

int cpu_adam_threads(double cores_perc, int ranks_per_node) {
  const double share = cores_perc * hardware_threads() / std::max(1, ranks_per_node);
  return std::clamp(static_cast<int>(share), 1, hardware_threads());
}

void cpu_adam_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                   const CpuAdamStep& s, uint16_t* params_16bit, Copy16 format) {
  if (n < 0) throw Error("cpu_adam_step: negative element count " + std::to_string(n));
  if (s.step < 1) throw Error("cpu_adam_step: step is 1-based, got " + std::to_string(s.step));
  if (n == 0) return;
  const Coeffs c = make_coeffs(s, format);
  const Kernel kernel = kernel_for(cpu_adam_isa());

  const int threads = std::min(s.num_threads > 0 ? s.num_threads : at::get_num_threads(), hardware_threads());
  for_each_block((n + kBlock - 1) / kBlock, threads, [&](int64_t b) {
    const int64_t i = b * kBlock, len = std::min(n - i, kBlock);
    kernel(params + i, grads + i, exp_avg + i, exp_avg_sq + i, len, c, params_16bit ? params_16bit + i : nullptr);
  });
}

void cpu_adam_step(at::Tensor& params, const at::Tensor& grads, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                   const CpuAdamStep& s, const at::Tensor& params_16bit) {
  check_tensor(params, "params", at::kFloat, -1);
  const int64_t n = params.numel();
  check_tensor(grads, "grads", at::kFloat, n);
  check_tensor(exp_avg, "exp_avg", at::kFloat, n);
  check_tensor(exp_avg_sq, "exp_avg_sq", at::kFloat, n);
  const bool fp16 = params_16bit.defined() && params_16bit.scalar_type() == at::kHalf;
  if (params_16bit.defined()) check_tensor(params_16bit, "params_16bit", fp16 ? at::kHalf : at::kBFloat16, n);
  cpu_adam_step(params.data_ptr<float>(), grads.const_data_ptr<float>(), exp_avg.data_ptr<float>(),
                exp_avg_sq.data_ptr<float>(), n, s,
                params_16bit.defined() ? reinterpret_cast<uint16_t*>(params_16bit.data_ptr()) : nullptr,
                fp16 ? Copy16::fp16 : Copy16::bf16);
}

}  // namespace stratum::optim
