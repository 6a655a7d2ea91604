// Updates per second (elements per second) of Stratum's CPU Adam
// (optim/cpu_adam.h) against libtorch's CPU Adam on the same CPU and threads:
// torch::optim::Adam (one ATen op per line of the update, temporaries included)
// and at::_fused_adam_ (ATen's fused CPU kernel). Same math for all: Adam, no
// weight decay, fp32, contiguous flat buffers; each timed step is a full step.
// Run: build/bin/bench_cpu_adam [--sizes 10000000,100000000] [--steps 5] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/ops/_fused_adam.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "stratum/optim/cpu_adam.h"

using namespace stratum::optim;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

// Seconds of the fastest of `steps` calls of `step`, after one warm-up call
// (which also faults in lazily allocated optimizer state). The fastest, because
// the machines this runs on are shared: a slower call measures a neighbour.
template <class F>
double seconds_per_step(int steps, F&& step) {
  step();
  double best = 1e30;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Updates per second of Stratum's CPU Adam against libtorch's CPU Adam"};
  std::vector<int64_t> sizes = {10'000'000, 100'000'000};
  int steps = 5;
  bool as_json = false;
  app.add_option("--sizes", sizes, "parameter counts, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--steps", steps, "timed steps per case (the fastest counts)")->capture_default_str();
  app.add_flag("--json", as_json, "one JSON line per case and optimizer instead of the markdown table");
  CLI11_PARSE(app, argc, argv);
  c10::AutoGradMode no_grad(false);
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  if (!as_json) {
    std::printf("CPU: %s, %d logical cores; cpu_adam ISA: %s; torch %s\n\n", cpu_model().c_str(), all,
                isa_name(cpu_adam_isa()), TORCH_VERSION);
    std::printf("| params | threads | cpu_adam (upd/s) | cpu_adam + bf16 copy (upd/s) | torch::optim::Adam (upd/s) | "
                "at::_fused_adam_ (upd/s) | vs optim::Adam | vs _fused_adam_ |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  for (int64_t n : sizes) {
    for (int threads : {1, all}) {
      at::set_num_threads(threads);
      torch::manual_seed(0);
      at::Tensor params = torch::randn({n}), grads = torch::randn({n}) * 1e-2;
      at::Tensor exp_avg = torch::zeros({n}), exp_avg_sq = torch::zeros({n});
      at::Tensor bf16 = torch::empty({n}, torch::kBFloat16);

      int64_t step = 0;
      auto ours = [&](const at::Tensor& out) {
        CpuAdamStep s;
        s.lr = kLr, s.beta1 = kBeta1, s.beta2 = kBeta2, s.eps = kEps, s.decoupled = false, s.step = ++step;
        cpu_adam_step(params, grads, exp_avg, exp_avg_sq, s, out);
      };
      const double t_ours = seconds_per_step(steps, [&] { ours(at::Tensor()); });
      const double t_ours_bf16 = seconds_per_step(steps, [&] { ours(bf16); });
      bf16 = at::Tensor();

      // at::_fused_adam_ on the same buffers (their values do not change the speed).
      const at::Tensor step_t = torch::zeros({});
      const at::Tensor p_list[] = {params}, g_list[] = {grads}, m_list[] = {exp_avg}, v_list[] = {exp_avg_sq},
                       s_list[] = {step_t};
      const double t_fused = seconds_per_step(steps, [&] {
        step_t.add_(1);
        at::_fused_adam_(p_list, g_list, m_list, v_list, {}, s_list, kLr, kBeta1, kBeta2, 0.0, kEps, false, false,
                         std::nullopt, std::nullopt);
      });
      exp_avg = exp_avg_sq = at::Tensor();  // room for torch::optim's own state

      at::Tensor leaf = params.requires_grad_(true);
      leaf.mutable_grad() = grads;
      torch::optim::Adam adam({leaf}, torch::optim::AdamOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps));
      const double t_torch = seconds_per_step(steps, [&] { adam.step(); });

      if (as_json) {
        const std::pair<const char*, double> cases[] = {{"stratum-cpu-adam", t_ours},
                                                        {"stratum-cpu-adam-bf16-copy", t_ours_bf16},
                                                        {"torch-optim-adam", t_torch},
                                                        {"aten-fused-adam", t_fused}};
        for (const auto& [system, seconds] : cases)
          std::printf("%s\n", nlohmann::ordered_json{{"system", system},
                                                     {"params", n},
                                                     {"threads", threads},
                                                     {"updates_per_s", n / seconds},
                                                     {"isa", isa_name(cpu_adam_isa())}}
                                  .dump()
                                  .c_str());
      } else {
        std::printf("| %lldM | %d | %.3g | %.3g | %.3g | %.3g | %.2fx | %.2fx |\n",
                    static_cast<long long>(n / 1'000'000), threads, n / t_ours, n / t_ours_bf16, n / t_torch,
                    n / t_fused, t_torch / t_ours, t_fused / t_ours);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
