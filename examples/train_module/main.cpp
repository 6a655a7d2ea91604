// A user's own torch::nn::Module, trained data parallel at ZeRO-2 by Stratum:
// a small regression net learning y = sin(x)·w. Every rank draws its own
// samples; Stratum averages the gradients and shards the optimizer states
// and gradients over the ranks.
//
//   mpirun -np 2 build/train_module [steps]
#include <stratum/stratum.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

struct Regressor : torch::nn::Module {
  Regressor() {
    hidden = register_module("hidden", torch::nn::Linear(8, 64));
    out = register_module("out", torch::nn::Linear(64, 1));
  }
  // The engine calls forward() with what engine.forward() gets: here the loss.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& y) {
    return torch::mse_loss(out(torch::tanh(hidden(x))), y);
  }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 100;
  if (steps < 10) {
    std::fprintf(stderr, "give at least 10 steps (the first and the last 5 are compared), got %d\n", steps);
    return 2;
  }
  // The context first: it outlives the engine, and MPI finalizes when it goes.
  const auto ctx = stratum::distributed::init();
  const auto config = stratum::Config::from_string(R"({
    "train_micro_batch_size_per_gpu": 32,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "zero_optimization": {"stage": 2}
  })", "train_module config");

  torch::manual_seed(0);  // the same initial weights on every rank
  auto model = std::make_shared<Regressor>();
  auto engine = stratum::initialize(config, model, ctx);

  const torch::Tensor w = torch::linspace(-1, 1, 8).unsqueeze(1);
  torch::manual_seed(1 + ctx.rank);  // each rank its own data
  double first = 0, last = 0;  // the mean loss of the first and the last 5 steps
  for (int step = 1; step <= steps; ++step) {
    const torch::Tensor x = torch::randn({32, 8});
    const torch::Tensor y = torch::sin(x).mm(w);
    torch::Tensor loss = engine.forward(x.to(ctx.device()), y.to(ctx.device()));  // the rank's GPU, or the CPU
    engine.backward(loss);
    engine.step();
    const double value = loss.item<double>();
    if (step <= 5) first += value / 5;
    if (step > steps - 5) last += value / 5;
    if (ctx.rank == 0 && (step == 1 || step % 20 == 0))
      std::printf("step %d loss %.5f (ZeRO-%d over %d ranks)\n", step, value,
                  static_cast<int>(config.zero_optimization.stage), ctx.world_size);
  }
  if (ctx.rank == 0) std::printf("loss %.5f -> %.5f (first and last 5 steps)\n", first, last);
  return last < first ? 0 : 1;
}
