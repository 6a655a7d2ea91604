// Training throughput of the engine on a GPT-2-shaped model (bench/gpt_bench_model.h),
// synthetic tokens, bf16, AdamW: tokens/s per GPU, TFLOP/s and MFU (against
// 989 TFLOP/s, FLOPs per token 6N + 12 L d seq), step time, peak memory.
// Run: mpirun -np 2 build/bin/bench_engine --stage 2 [--layers 24 --hidden 1024 --heads 16 --seq 1024 --micro 8]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "gpt_bench_model.h"
#include "stratum/engine/engine.h"
#ifdef STRATUM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

using namespace stratum;

namespace {

void device_sync() {
#ifdef STRATUM_WITH_CUDA
  c10::cuda::device_synchronize();
#endif
}

double peak_gib(int device) {
#ifdef STRATUM_WITH_CUDA
  if (device >= 0) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    return stats.allocated_bytes[0].peak / double(1 << 30);
  }
#endif
  (void)device;
  return 0.0;
}

struct Options {
  int64_t layers = 24, hidden = 1024, heads = 16, seq = 1024, vocab = 50304, micro = 8, gas = 1, steps = 10, warmup = 3;
  int stage = 2;
  std::string precision = "bf16";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (k == "--layers") o.layers = v;
    else if (k == "--hidden") o.hidden = v;
    else if (k == "--heads") o.heads = v;
    else if (k == "--seq") o.seq = v;
    else if (k == "--vocab") o.vocab = v;
    else if (k == "--micro") o.micro = v;
    else if (k == "--gas") o.gas = v;
    else if (k == "--steps") o.steps = v;
    else if (k == "--stage") o.stage = static_cast<int>(v);
    else if (k == "--precision") o.precision = argv[i + 1];
    else throw Error("bench_engine: unknown flag " + k);
  }
  return o;
}

void run(const dist::DistContext& ctx, const Options& o) {
  const auto [layers, hidden, heads, seq, vocab, micro, gas, steps, warmup, stage, precision] = o;
  const int dp = ctx.device_world()->size();
  const std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(micro) +
                           ", \"gradient_accumulation_steps\": " + std::to_string(gas) + ", " +
                           (precision == "bf16" ? "\"bf16\": {\"enabled\": true}, " : "") +
                           "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4, \"weight_decay\": 0.1}}, "
                           "\"gradient_clipping\": 1.0, \"zero_optimization\": {\"stage\": " + std::to_string(stage) +
                           ", \"overlap_comm\": true, \"reduce_bucket_size\": 50000000}}";
  Config config = Config::from_string(json, "bench");
  torch::manual_seed(1);
  auto model = bench::Gpt(vocab, seq, hidden, layers, heads);
  int64_t n_params = 0;
  for (auto& p : model->parameters()) n_params += p.numel();
  auto engine = initialize(config, model.ptr(), ctx);
  const c10::Device device = ctx.gpu_world ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(ctx.cuda_device))
                                           : c10::Device(c10::kCPU);
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  double seconds = 0, loss_value = 0;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    device_sync();
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < gas; ++k) {
      at::Tensor tokens = torch::randint(vocab, {micro, seq + 1}, opts);
      at::Tensor loss = engine.forward(tokens.narrow(1, 0, seq), tokens.narrow(1, 1, seq));
      engine.backward(loss);
      engine.step();
      if (k == gas - 1) loss_value = loss.item<double>();
    }
    device_sync();
    if (s >= warmup) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double step_time = seconds / steps;
  const double tokens_per_gpu = micro * gas * seq / step_time;
  const double flops_per_token = 6.0 * n_params + 12.0 * layers * hidden * seq;
  const double tflops = tokens_per_gpu * flops_per_token / 1e12;
  const auto bytes = engine.core().model_state_bytes();
  if (ctx.rank == 0)
    std::printf("engine_bench: params %.1fM stage %d dp %d %s micro %lld gas %lld seq %lld | step %.1f ms | "
                "tokens/s/GPU %.0f | TFLOP/s/GPU %.1f | MFU %.1f%% | peak %.2f GiB | model states %.2f GiB | "
                "loss %.3f\n",
                n_params / 1e6, stage, dp, precision.c_str(), (long long)micro, (long long)gas, (long long)seq,
                step_time * 1e3, tokens_per_gpu, tflops, 100.0 * tflops / 989.0, peak_gib(ctx.cuda_device),
                bytes.total() / double(1 << 30), loss_value);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  dist::DistContext ctx = dist::init();
  // Every CUDA object dies inside run(), before dist::finalize() (see init.h).
  run(ctx, options);
  ctx.cpu_world.reset();
  ctx.gpu_world.reset();
  dist::finalize();
  return 0;
}
