// A user's own model as a stratum::nn::LayerStack, trained at ZeRO-3 (each
// rank holds a shard of every parameter; a layer is gathered just before it
// runs) with activation checkpointing (each residual block's activations are
// recomputed in backward). The engine owns the loop over the layers, which is
// what ZeRO-3 and checkpointing need.
//
//   mpirun -np 2 build/train_layer_stack [steps]
#include <stratum/stratum.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

namespace {

// A layer holds submodules only (their parameters are registered under the path given to append()).
class Projection : public stratum::nn::StackLayer {
 public:
  Projection(int64_t in, int64_t out) : StackLayer("Projection") { linear = register_module("proj", torch::nn::Linear(in, out)); }
  at::Tensor forward(const at::Tensor& x) override { return linear(x); }
  torch::nn::Linear linear{nullptr};
};

class ResidualBlock : public stratum::nn::StackLayer {
 public:
  explicit ResidualBlock(int64_t width) : StackLayer("ResidualBlock") {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    up = register_module("up", torch::nn::Linear(width, 4 * width));
    down = register_module("down", torch::nn::Linear(4 * width, width));
  }
  at::Tensor forward(const at::Tensor& x) override { return x + down(torch::gelu(up(norm(x)))); }
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
};

std::shared_ptr<stratum::nn::LayerStackImpl> make_model(int64_t width, int blocks) {
  auto stack = std::make_shared<stratum::nn::LayerStackImpl>();
  stack->append(std::make_shared<Projection>(16, width), "input");
  for (int i = 0; i < blocks; ++i) stack->append(std::make_shared<ResidualBlock>(width), "blocks." + std::to_string(i));
  stack->append(std::make_shared<Projection>(width, 1), "output");
  return stack;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 60;
  if (steps < 10) {
    std::fprintf(stderr, "give at least 10 steps (the first and the last 5 are compared), got %d\n", steps);
    return 2;
  }
  const auto ctx = stratum::distributed::init();  // first: it outlives the engine
  const auto config = stratum::Config::from_string(R"({
    "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "activation_checkpointing": {}
  })", "train_layer_stack config");

  torch::manual_seed(0);
  auto model = make_model(64, 4);
  auto engine = stratum::initialize(config, model, ctx);

  // The data: a fixed random "teacher" net's outputs, the same on every rank.
  torch::manual_seed(7);
  const torch::Tensor w1 = torch::randn({16, 32}) / 4, w2 = torch::randn({32, 1}) / 4;
  torch::manual_seed(1 + ctx.rank);  // each rank its own inputs
  double first = 0, last = 0;  // the mean loss of the first and the last 5 steps
  for (int step = 1; step <= steps; ++step) {
    double step_loss = 0;
    for (int micro = 0; micro < 2; ++micro) {  // gradient_accumulation_steps
      const torch::Tensor x = torch::randn({16, 16});
      const torch::Tensor y = torch::tanh(x.mm(w1)).mm(w2);
      torch::Tensor loss = torch::mse_loss(engine.forward(x.to(ctx.device())), y.to(ctx.device()));
      engine.backward(loss);
      engine.step();  // updates at the accumulation boundary
      step_loss += loss.item<double>() / 2;
    }
    if (step <= 5) first += step_loss / 5;
    if (step > steps - 5) last += step_loss / 5;
    if (ctx.rank == 0 && (step == 1 || step % 20 == 0))
      std::printf("step %d loss %.5f (ZeRO-3 over %d ranks, %zu layers)\n", step, step_loss, ctx.world_size,
                  model->size());
  }
  if (ctx.rank == 0) std::printf("loss %.5f -> %.5f (first and last 5 steps)\n", first, last);
  return last < first ? 0 : 1;
}
