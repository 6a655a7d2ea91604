#pragma once
// Trains the test MLP on a fixed global batch per step, whatever the
// data-parallel size: what the checkpoint tests save, load and compare.
#include <torch/torch.h>

#include "../engine/mlp.h"
#include "stratum/engine/engine.h"

namespace stratum::test {

inline constexpr int kGlobalBatch = 16;

inline std::string checkpoint_test_config(int stage) {
  return R"({"train_batch_size": 16, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 5}},
    "gradient_clipping": 0.5, "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 300, "overlap_comm": true}})";
}

struct Trainer {
  Trainer(int stage, std::shared_ptr<distributed::Communicator> dp, uint64_t init_seed = 42)
      : config(Config::from_string(checkpoint_test_config(stage), "ckpt-test")), dp(std::move(dp)) {
    torch::manual_seed(init_seed);
    model = Mlp();
    engine = std::make_unique<Engine<MlpImpl>>(initialize(config, model.ptr(), this->dp, torch::kCPU));
  }
  // One optimizer step on the global batch of `step` (same data whatever the DP size).
  double train_step(int step) {
    const auto& b = engine->core().batch();
    const int n = dp->size(), r = dp->rank();
    const int64_t m = b.micro_batch_per_gpu;
    torch::manual_seed(1000 + step);
    at::Tensor x = torch::randn({kGlobalBatch, 16}), y = torch::randn({kGlobalBatch, 4});
    double local = 0;
    for (int k = 0; k < b.gradient_accumulation_steps; ++k) {
      const int64_t start = (k * n + r) * m;
      at::Tensor loss = torch::mse_loss(engine->forward(x.narrow(0, start, m)), y.narrow(0, start, m));
      engine->backward(loss);
      engine->step();
      local += loss.item<double>() / b.gradient_accumulation_steps;
    }
    at::Tensor l = torch::full({1}, local, torch::kDouble);
    dp->all_reduce(l, distributed::ReduceOp::avg)->wait();
    return l.item<double>();
  }
  at::Tensor weights() {
    std::vector<at::Tensor> flat;
    for (auto& p : model->parameters()) flat.push_back(p.detach().reshape(-1));
    return torch::cat(flat);
  }
  Config config;
  std::shared_ptr<distributed::Communicator> dp;
  Mlp model{nullptr};
  std::unique_ptr<Engine<MlpImpl>> engine;
};


}  // namespace stratum::test
