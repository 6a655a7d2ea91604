// The experts' GEMMs of one mixture-of-experts layer, forward and backward,
// by the path grouped_linear picks (nn/moe/grouped_linear.h: by the experts'
// sizes), or with STRATUM_MOE_GROUPED_GEMM=1 the grouped GEMM (ATen's
// _grouped_mm on a GPU in bf16), =0 a loop of one GEMM per expert, at a
// shape's experts, top_k, hidden and inner width, tokens routed uniformly at
// random. Prints one JSON line: the path taken, milliseconds a
// forward+backward and TFLOP/s (6 x rows x hidden x 3 inner a pass).
//
//   bench_moe_gemm --experts 8 --top-k 2 --hidden 4096 --ffn 14336 --tokens 8192     (Mixtral)
//   bench_moe_gemm --experts 128 --top-k 8 --hidden 2048 --ffn 768 --tokens 8192     (Qwen3-30B-A3B)
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <iostream>

#include "stratum/nn/mlp.h"
#include "stratum/nn/moe/grouped_linear.h"
#ifdef STRATUM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace {

void synchronize(const at::Tensor& t) {
#ifdef STRATUM_WITH_CUDA
  if (t.is_cuda()) at::cuda::getCurrentCUDAStream().synchronize();
#else
  (void)t;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"grouped expert GEMMs against a loop of per-expert GEMMs"};
  int64_t experts = 8, top_k = 2, hidden = 4096, ffn = 14336, tokens = 8192, iters = 20, warmup = 3;
  std::string device = "cuda";
  app.add_option("--experts", experts)->capture_default_str();
  app.add_option("--top-k", top_k)->capture_default_str();
  app.add_option("--hidden", hidden)->capture_default_str();
  app.add_option("--ffn", ffn)->capture_default_str();
  app.add_option("--tokens", tokens)->capture_default_str();
  app.add_option("--iters", iters)->capture_default_str();
  app.add_option("--device", device, "cuda or cpu")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const auto options = at::TensorOptions().device(at::Device(device)).dtype(device == "cpu" ? at::kFloat : at::kBFloat16);
  at::manual_seed(0);
  const int64_t rows = tokens * top_k;
  // Rows per expert from a uniform routing, sorted by expert as the layer sorts them.
  const at::Tensor choice = at::randint(experts, {rows}, at::kLong);
  const at::Tensor counts_t = at::bincount(choice, {}, experts);
  std::vector<int64_t> counts(counts_t.data_ptr<int64_t>(), counts_t.data_ptr<int64_t>() + experts);
  // One buffer per kind, as ZeRO lays an expert's weights out: gate, up, down.
  const at::Tensor flat = (at::randn({experts * 3 * ffn * hidden}, options) * 0.02).requires_grad_(false);
  std::vector<std::vector<at::Tensor>> gate_up(2), down(1);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t j = 0; j < 3; ++j) {
      at::Tensor w = flat.narrow(0, (e * 3 + j) * ffn * hidden, ffn * hidden);
      w = j < 2 ? w.view({ffn, hidden}) : w.view({hidden, ffn});
      w = w.detach().requires_grad_(true);
      (j < 2 ? gate_up[static_cast<size_t>(j)] : down[0]).push_back(w);
    }
  const at::Tensor x = at::randn({rows, hidden}, options).requires_grad_(true);
  const double flops = 6.0 * static_cast<double>(rows) * static_cast<double>(hidden) * 3.0 * static_cast<double>(ffn);
  auto step = [&] {
    const at::Tensor h = stratum::nn::moe::grouped_linear(x, counts, gate_up);
    const at::Tensor y = stratum::nn::moe::grouped_linear(stratum::nn::swiglu(h), counts, down);
    torch::autograd::backward({y}, {at::ones_like(y)});
  };
  for (int64_t i = 0; i < warmup; ++i) step();
  synchronize(x);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) step();
  synchronize(x);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                    static_cast<double>(iters);
  std::cout << nlohmann::json{{"path", stratum::nn::moe::grouped_linear_path(x, counts, gate_up)},
                              {"experts", experts}, {"top_k", top_k}, {"hidden", hidden}, {"ffn", ffn},
                              {"tokens", tokens}, {"ms", ms}, {"tflops", flops / (ms * 1e-3) / 1e12}}
            << "\n";
  return 0;
}
