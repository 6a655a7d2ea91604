// The device Adam's memory bandwidth against a plain device-to-device copy on
// the same GPU: how far the one-pass update (30 bytes an element with fp32
// gradients and bf16 parameters, 28 with bf16 gradients) is from what the
// memory delivers. Usage: bench_adam_bandwidth [ELEMENTS] (default 1315723264:
// gpt2-1.3b's parameters, ZeRO-0's per-GPU update). One JSON line per case.
#include <cstdint>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#ifdef STRATUM_WITH_CUDA_KERNELS
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "stratum/optim/mixed_adam_cuda.h"
#include "cuda_timing.h"

using stratum::bench::seconds_per_call;
#endif

int main(int argc, char** argv) {
  CLI::App app{"The device Adam's memory bandwidth against a device-to-device copy: JSON lines"};
  int64_t n = 1'315'723'264;
  app.add_option("elements", n, "elements of the update")->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
#ifdef STRATUM_WITH_CUDA_KERNELS
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  at::Tensor master = at::randn({n}, f32), m = at::zeros({n}, f32), v = at::zeros({n}, f32);
  at::Tensor grad32 = at::randn({n}, f32), grad16 = grad32.to(at::kBFloat16), params16 = master.to(at::kBFloat16);
  at::Tensor step = at::ones({1}, f32);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  for (const bool wide_grad : {true, false}) {
    namespace oc = stratum::optim::cuda;
    oc::MixedAdamArgs a;
    a.n = n;
    a.master = master.data_ptr<float>();
    a.exp_avg = m.data_ptr<float>();
    a.exp_avg_sq = v.data_ptr<float>();
    a.grad = wide_grad ? grad32.const_data_ptr() : grad16.const_data_ptr();
    a.grad_dtype = wide_grad ? oc::Dtype::f32 : oc::Dtype::bf16;
    a.params16 = params16.data_ptr();
    a.params16_dtype = oc::Dtype::bf16;
    a.step = step.const_data_ptr<float>();
    a.lr = 1e-4f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f;
    const double s = seconds_per_call([&] { oc::launch_mixed_adam(a, stream); }, 10);
    const double bytes = double(n) * ((wide_grad ? 4 : 2) + 12 + 12 + 2);
    std::printf("{\"case\":\"adam grad %s\",\"n\":%lld,\"ms\":%.3f,\"TB_per_s\":%.3f}\n",
                wide_grad ? "fp32" : "bf16", static_cast<long long>(n), s * 1e3, bytes / s / 1e12);
  }
  const double s = seconds_per_call(
      [&] { cudaMemcpyAsync(v.data_ptr(), m.const_data_ptr(), n * 4, cudaMemcpyDeviceToDevice, stream); }, 10);
  std::printf("{\"case\":\"copy fp32\",\"n\":%lld,\"ms\":%.3f,\"TB_per_s\":%.3f}\n", static_cast<long long>(n),
              s * 1e3, 2.0 * n * 4 / s / 1e12);
  at::Tensor src = at::randn({n}, f32);
  const double s2 = seconds_per_call([&] { m.copy_(src); }, 10);
  std::printf("{\"case\":\"aten copy_ fp32\",\"n\":%lld,\"ms\":%.3f,\"TB_per_s\":%.3f}\n", static_cast<long long>(n),
              s2 * 1e3, 2.0 * n * 4 / s2 / 1e12);
  return 0;
#else
  (void)n;
  std::fprintf(stderr, "bench_adam_bandwidth: built without the CUDA kernels\n");
  return 2;
#endif
}
