// The pipeline's bubble as measured against the simulator's (pipeline/simulate.h)
// with the measured costs: each schedule trains a GPT-2 on CPU ranks (one
// pipeline stage a rank), every rank times its forwards, backwards (B and W
// apart under zb-h1) and waits (pipeline/executor.h), and rank 0 prints, per
// schedule, the mean costs, the bubble the simulator predicts from them and
// the bubble measured: (slowest rank's schedule time - busiest rank's compute)
// / busiest rank's compute, the simulator's definition.
// Run: mpirun -np 4 build/bin/bench_pipeline_bubble [--layers 8 --micro-batches 8 --steps 5]
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "stratum/distributed/job.h"
#include "stratum/engine/engine.h"
#include "stratum/models/causal_lm.h"
#include "stratum/pipeline/simulate.h"

using namespace stratum;

namespace {

struct Options {
  int layers = 8, micro_batches = 8, micro = 4, seq = 64, steps = 5, warmup = 2;
  std::string model = "gpt2-tiny-bytes";
  bool json = false;  // one JSON line per schedule (bench/run_matrix.sh) instead of the table
};

int run(const Options& o, distributed::DistContext& ctx) {
  const int p = ctx.world_size;
  if (ctx.rank == 0 && !o.json) {
    std::printf("%s, %d layers, %d ranks (one stage each), %d micro-batches of %d x %d tokens, %d steps timed\n",
                o.model.c_str(), o.layers, p, o.micro_batches, o.micro, o.seq, o.steps);
    std::printf("%-12s %9s %9s %9s %12s %12s\n", "schedule", "F (ms)", "B (ms)", "W (ms)", "simulated", "measured");
  }
  for (const std::string schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    const int v = schedule == "interleaved" ? 2 : 1;
    const std::string json = R"({"train_micro_batch_size_per_gpu": )" + std::to_string(o.micro) +
                             R"(, "gradient_accumulation_steps": )" + std::to_string(o.micro_batches) +
                             R"(, "optimizer": {"type": "AdamW"}, "pipeline": {"stages": )" + std::to_string(p) +
                             R"(, "schedule": ")" + schedule + "\", \"virtual_stages\": " + std::to_string(v) +
                             R"(, "partition_method": "type:Block"}})";
    Config config = Config::from_string(json, "bench");
    torch::manual_seed(1);
    auto model = models::build_model(models::make_model_config(
        o.model, {{"layers", std::to_string(o.layers)}, {"max_seq_len", std::to_string(o.seq)}, {"dropout", "0"}}));
    auto engine = initialize(config, model, ctx);
    const auto next = [&] {
      at::Tensor t = torch::randint(0, 256, {o.micro, o.seq + 1}, torch::kLong);
      return MicroBatch{t.narrow(1, 0, o.seq), t.narrow(1, 1, o.seq)};
    };
    // Per rank, summed over the timed steps: forward, full backward, B, W, schedule time (without the step).
    at::Tensor sums = at::zeros({5}, at::kDouble);
    for (int s = 0; s < o.warmup + o.steps; ++s) {
      engine.train_batch(next);
      if (s < o.warmup) continue;
      const pipeline::StepTiming& t = engine.pipeline()->last_timing();
      sums += at::tensor({t.forward, t.backward, t.backward_input, t.backward_weight, t.total - t.step}, at::kDouble);
    }
    at::Tensor all = at::empty({5 * p}, at::kDouble);
    ctx.cpu_world->all_gather(all, sums)->wait();
    if (ctx.rank != 0) continue;
    const double n = static_cast<double>(o.steps) * o.micro_batches * v;  // computes of a kind per rank
    std::vector<pipeline::Costs> costs(p);
    double slowest = 0, busiest = 0, f = 0, b = 0, w = 0;
    for (int r = 0; r < p; ++r) {
      const double* x = all.data_ptr<double>() + 5 * r;
      costs[r] = pipeline::Costs{x[0] / n, (x[1] + x[2]) / n, x[3] / n};
      slowest = std::max(slowest, x[4] / o.steps);
      busiest = std::max(busiest, (x[0] + x[1] + x[2] + x[3]) / o.steps);
      f += costs[r].forward / p;
      b += costs[r].backward_input / p;
      w += costs[r].backward_weight / p;
    }
    const double simulated = pipeline::simulate(engine.pipeline()->schedule(), costs).bubble();
    const double measured = (slowest - busiest) / busiest;
    if (o.json) {
      std::printf("{\"system\": \"stratum-pipeline\", \"schedule\": \"%s\", \"virtual_stages\": %d, \"stages\": %d, "
                  "\"micro_batches\": %d, \"model\": \"%s\", \"layers\": %d, \"forward_ms\": %.4f, "
                  "\"backward_input_ms\": %.4f, \"backward_weight_ms\": %.4f, \"simulated_bubble\": %.5f, "
                  "\"measured_bubble\": %.5f, \"theory_bubble\": %.5f}\n",
                  schedule.c_str(), v, p, o.micro_batches, o.model.c_str(), o.layers, 1e3 * f, 1e3 * b, 1e3 * w,
                  simulated, measured, pipeline::simulate(engine.pipeline()->schedule()).bubble());
      std::fflush(stdout);
      continue;
    }
    std::printf("%-12s %9.2f %9.2f %9.2f %11.1f%% %11.1f%%\n", (schedule + (v > 1 ? " v2" : "")).c_str(), 1e3 * f,
                1e3 * b, 1e3 * w, 100 * simulated, 100 * measured);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pipeline bubble: measured against the simulator"};
  Options o;
  app.add_option("--model", o.model, "preset");
  app.add_option("--layers", o.layers, "transformer blocks");
  app.add_option("--micro-batches", o.micro_batches, "micro-batches a step (a multiple of the ranks)");
  app.add_option("--micro", o.micro, "sequences a micro-batch");
  app.add_option("--seq", o.seq, "tokens a sequence");
  app.add_option("--steps", o.steps, "timed steps");
  app.add_flag("--json", o.json, "one JSON line per schedule");
  CLI11_PARSE(app, argc, argv);
  return distributed::run_distributed_job("bench_pipeline_bubble", [&](distributed::DistContext& ctx) { return run(o, ctx); });
}
