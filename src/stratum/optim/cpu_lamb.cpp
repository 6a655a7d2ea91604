// Built with -fno-math-errno (sqrt then vectorizes: no errno branch) and
// -ffp-contract=off (no FMA contraction: every ISA path rounds alike), set for
// this file in src/stratum/CMakeLists.txt. The element loops are plain C++
// that GCC vectorizes for the target of the function they are inlined into
// (checked in the disassembly: vsqrtps/vdivps on ymm for avx2, zmm for avx512).
#include "stratum/optim/cpu_lamb.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "stratum/core/error.h"
#include "stratum/optim/cpu_parallel.h"

#define STRATUM_LAMB_INLINE inline __attribute__((always_inline))

namespace stratum::optim {
namespace {

// Per-call scalars: double math, then one rounding to fp32.
struct Coeffs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, bc1, bc2, weight_decay, grad_scale;
};

Coeffs make_coeffs(const CpuLambStep& s) {
  const double step = static_cast<double>(s.step);
  Coeffs c{};
  c.beta1 = float(s.beta1);
  c.one_minus_beta1 = float(1.0 - s.beta1);
  c.beta2 = float(s.beta2);
  c.one_minus_beta2 = float(1.0 - s.beta2);
  c.eps = float(s.eps);
  // Without bias correction both are 1, and dividing by them is exact.
  c.bc1 = s.bias_correction ? float(1.0 - std::pow(s.beta1, step)) : 1.0f;
  c.bc2 = s.bias_correction ? float(1.0 - std::pow(s.beta2, step)) : 1.0f;
  c.weight_decay = float(s.weight_decay);
  c.grad_scale = float(s.grad_scale);
  return c;
}

// Elements a pass works on at once (a thread's unit) and the tile of u kept on the stack.
constexpr int64_t kPiece = 64 * 1024;
constexpr int64_t kTile = 1024;
constexpr int kLanes = 8;

// Sum of x^2 in double: lane j adds elements j, j + kLanes, ... in order, then
// the lanes are added in order, so the vectorized and the plain code agree.
STRATUM_LAMB_INLINE double sum_squares(const float* __restrict x, int64_t n) {
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
  for (int j = 0; i < n; ++i, ++j) lane[j] += double(x[i]) * double(x[i]);
  double total = 0.0;
  for (int j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}

// Pass 1 over one piece: moments in place; the piece's sums of p^2 and u^2.
template <bool kUnscale>
STRATUM_LAMB_INLINE void moments_body(const float* __restrict p, const float* __restrict g, float* __restrict m,
                                      float* __restrict v, int64_t n, const Coeffs& c, double* sums) {
  const float beta1 = c.beta1, one_minus_beta1 = c.one_minus_beta1, beta2 = c.beta2,
              one_minus_beta2 = c.one_minus_beta2, eps = c.eps, bc1 = c.bc1, bc2 = c.bc2, wd = c.weight_decay,
              grad_scale = c.grad_scale;
  float u[kTile];
  double sp = 0.0, su = 0.0;
  for (int64_t t = 0; t < n; t += kTile) {
    const int64_t len = std::min(kTile, n - t);
    const float* __restrict pt = p + t;
    const float* __restrict gt = g + t;
    float* __restrict mt = m + t;
    float* __restrict vt = v + t;
    for (int64_t i = 0; i < len; ++i) {
      float gi = gt[i];
      if (kUnscale) gi = gi / grad_scale;
      const float mi = beta1 * mt[i] + one_minus_beta1 * gi;
      const float vi = beta2 * vt[i] + one_minus_beta2 * gi * gi;
      mt[i] = mi;
      vt[i] = vi;
      u[i] = (mi / bc1) / (std::sqrt(vi / bc2) + eps) + wd * pt[i];
    }
    sp += sum_squares(pt, len);
    su += sum_squares(u, len);
  }
  sums[0] = sp;
  sums[1] = su;
}

// Pass 2 over one piece: the same u, p -= step u (step = lr r, rounded once).
STRATUM_LAMB_INLINE void update_body(float* __restrict p, const float* __restrict m, const float* __restrict v,
                                     int64_t n, const Coeffs& c, float step) {
  const float eps = c.eps, bc1 = c.bc1, bc2 = c.bc2, wd = c.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float u = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + wd * p[i];
    p[i] = p[i] - step * u;
  }
}

using MomentsKernel = void (*)(const float*, const float*, float*, float*, int64_t, const Coeffs&, double*);
using UpdateKernel = void (*)(float*, const float*, const float*, int64_t, const Coeffs&, float);

template <bool kUnscale>
void moments_scalar(const float* p, const float* g, float* m, float* v, int64_t n, const Coeffs& c, double* sums) {
  moments_body<kUnscale>(p, g, m, v, n, c, sums);
}
void update_scalar(float* p, const float* m, const float* v, int64_t n, const Coeffs& c, float step) {
  update_body(p, m, v, n, c, step);
}

#if defined(__x86_64__)
template <bool kUnscale>
__attribute__((target("avx2,fma,f16c"))) void moments_avx2(const float* p, const float* g, float* m, float* v,
                                                           int64_t n, const Coeffs& c, double* sums) {
  moments_body<kUnscale>(p, g, m, v, n, c, sums);
}
__attribute__((target("avx2,fma,f16c"))) void update_avx2(float* p, const float* m, const float* v, int64_t n,
                                                          const Coeffs& c, float step) {
  update_body(p, m, v, n, c, step);
}
template <bool kUnscale>
__attribute__((target("avx512f"))) void moments_avx512(const float* p, const float* g, float* m, float* v, int64_t n,
                                                       const Coeffs& c, double* sums) {
  moments_body<kUnscale>(p, g, m, v, n, c, sums);
}
__attribute__((target("avx512f"))) void update_avx512(float* p, const float* m, const float* v, int64_t n,
                                                      const Coeffs& c, float step) {
  update_body(p, m, v, n, c, step);
}
#endif

MomentsKernel moments_kernel(CpuAdamIsa isa, bool unscale) {
#if defined(__x86_64__)
  if (isa == CpuAdamIsa::avx512) return unscale ? moments_avx512<true> : moments_avx512<false>;
  if (isa == CpuAdamIsa::avx2) return unscale ? moments_avx2<true> : moments_avx2<false>;
#endif
  (void)isa;
  return unscale ? moments_scalar<true> : moments_scalar<false>;
}

UpdateKernel update_kernel(CpuAdamIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuAdamIsa::avx512) return update_avx512;
  if (isa == CpuAdamIsa::avx2) return update_avx2;
#endif
  (void)isa;
  return update_scalar;
}

// The runs cut into pieces of at most kPiece elements: the threads' work items.
struct Piece {
  size_t run;
  int64_t offset, numel;
};

std::vector<Piece> pieces_of(const char* fn, const std::vector<ParamRun>& runs) {
  std::vector<Piece> pieces;
  int64_t end = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const ParamRun& r = runs[k];
    if (r.numel < 1 || r.offset < end || r.param < 0)
      throw Error(std::string(fn) + ": run " + std::to_string(k) + " (parameter " + std::to_string(r.param) +
                  ", elements " + std::to_string(r.offset) + " + " + std::to_string(r.numel) +
                  ") is empty, overlaps the run before or names a negative parameter");
    end = r.offset + r.numel;
    for (int64_t off = 0; off < r.numel; off += kPiece)
      pieces.push_back(Piece{k, r.offset + off, std::min(kPiece, r.numel - off)});
  }
  return pieces;
}

int threads_for(const CpuLambStep& s) { return std::clamp(s.num_threads, 1, detail::hardware_threads()); }

void check_step(const char* fn, const CpuLambStep& s) {
  if (s.step < 1) throw Error(std::string(fn) + ": step is 1-based, got " + std::to_string(s.step));
}

}  // namespace

void cpu_lamb_moments(const float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      const std::vector<ParamRun>& runs, const CpuLambStep& s, double* sq_params,
                      double* sq_updates) {
  constexpr const char* fn = "cpu_lamb_moments";
  check_step(fn, s);
  const std::vector<Piece> pieces = pieces_of(fn, runs);
  const Coeffs c = make_coeffs(s);
  const MomentsKernel kernel = moments_kernel(cpu_adam_isa(), s.grad_scale != 1.0);
  std::vector<double> sums(2 * pieces.size());
  detail::for_each_block(static_cast<int64_t>(pieces.size()), threads_for(s), [&](int64_t k) {
    const Piece& q = pieces[k];
    kernel(params + q.offset, grads + q.offset, exp_avg + q.offset, exp_avg_sq + q.offset, q.numel, c, &sums[2 * k]);
  });
  // In piece order, whichever thread computed them: the result does not depend on the threads.
  for (size_t k = 0; k < pieces.size(); ++k) {
    const int64_t param = runs[pieces[k].run].param;
    sq_params[param] += sums[2 * k];
    sq_updates[param] += sums[2 * k + 1];
  }
}

void cpu_lamb_update(float* params, const float* exp_avg, const float* exp_avg_sq, const std::vector<ParamRun>& runs,
                     const CpuLambStep& s, const double* trust_ratios, uint16_t* params_16bit, Copy16 format) {
  constexpr const char* fn = "cpu_lamb_update";
  check_step(fn, s);
  const std::vector<Piece> pieces = pieces_of(fn, runs);
  const Coeffs c = make_coeffs(s);
  const UpdateKernel kernel = update_kernel(cpu_adam_isa());
  detail::for_each_block(static_cast<int64_t>(pieces.size()), threads_for(s), [&](int64_t k) {
    const Piece& q = pieces[k];
    const float step = float(s.lr * trust_ratios[runs[q.run].param]);
    kernel(params + q.offset, exp_avg + q.offset, exp_avg_sq + q.offset, q.numel, c, step);
    if (params_16bit) {
      const float* p = params + q.offset;
      uint16_t* out = params_16bit + q.offset;
      if (format == Copy16::fp16)
        for (int64_t i = 0; i < q.numel; ++i) out[i] = c10::Half(p[i]).x;
      else
        for (int64_t i = 0; i < q.numel; ++i) out[i] = c10::BFloat16(p[i]).x;
    }
  });
}

}  // namespace stratum::optim
