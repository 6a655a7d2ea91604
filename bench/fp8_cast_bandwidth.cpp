// FP8 casts' memory bandwidth against a plain device-to-device copy on the
// same GPU: how far each cast an FP8 step runs (nn/float8/cast.h: amax, scale,
// cast and the transposed copy) is from what the memory delivers. The casts
// were 20.3 ms of gpt2-1.3b's 208 ms FP8 step on the H200 (seq 2048, micro 8):
// its shapes are the default, [tokens, width] for the projections' inputs and
// output gradients. Usage: bench_fp8_cast_bandwidth [--tokens T] [--widths
// "2048 6144 8192"]. One JSON line per shape and cast: microseconds, the
// bytes the cast must move at least (the input read once, each output written
// once) over that time, and the copy's GB/s beside it.
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#ifdef STRATUM_WITH_CUDA_KERNELS
#include <ATen/ATen.h>

#include "stratum/nn/float8/cast.h"
#include "cuda_timing.h"

using stratum::bench::seconds_per_call;
#endif

int main(int argc, char** argv) {
  CLI::App app{"FP8 casts' memory bandwidth against a device-to-device copy: JSON lines"};
  int64_t tokens = 16384;
  std::string widths_text = "2048 6144 8192";
  int reps = 20;
  app.add_option("--tokens", tokens, "rows: tokens of a micro-batch (gpt2-1.3b: micro 8 x seq 2048)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--widths", widths_text, "columns, space-separated (each a multiple of 8)")->capture_default_str();
  app.add_option("--reps", reps, "timed calls a case")->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> widths;
  std::istringstream in(widths_text);
  for (int64_t w; in >> w;) widths.push_back(w);
  if (widths.empty()) {
    std::fprintf(stderr, "bench_fp8_cast_bandwidth: --widths '%s' holds no width\n", widths_text.c_str());
    return 2;
  }
#ifdef STRATUM_WITH_CUDA_KERNELS
  namespace f8 = stratum::nn::float8;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  for (const int64_t width : widths) {
    const at::Tensor x = at::randn({tokens, width}, bf16);
    at::Tensor copy = at::empty_like(x);
    const double n = static_cast<double>(x.numel());
    const double copy_s = seconds_per_call([&] { copy.copy_(x); }, reps);
    const double copy_gbs = 4.0 * n / copy_s / 1e9;
    struct Case {
      const char* name;
      f8::Scaling scaling;
      bool transposed;
      double out_bytes;  // written an element: one FP8 copy, or two with the transposed one
    };
    for (const Case& c : {Case{"tensorwise", f8::Scaling::tensorwise, false, 1.0},
                          Case{"tensorwise+transposed", f8::Scaling::tensorwise, true, 2.0},
                          Case{"rowwise+transposed", f8::Scaling::rowwise, true, 2.0}}) {
      f8::CastSpec spec;
      spec.scaling = c.scaling;
      const double s = seconds_per_call([&] { (void)f8::cast(x, spec, c.transposed); }, reps);
      const double gbs = (2.0 + c.out_bytes) * n / s / 1e9;
      std::printf(
          "{\"shape\": [%lld, %lld], \"cast\": \"%s\", \"us\": %.1f, \"gb_per_s\": %.0f, \"copy_gb_per_s\": %.0f, "
          "\"of_copy\": %.3f}\n",
          static_cast<long long>(tokens), static_cast<long long>(width), c.name, s * 1e6, gbs, copy_gbs,
          gbs / copy_gbs);
    }
  }
  return 0;
#else
  std::fprintf(stderr, "bench_fp8_cast_bandwidth: built without Stratum's CUDA kernels (a GPU build)\n");
  return 1;
#endif
}
