// stratum-train with each sequence split over 2 context-parallel ranks (ring
// and Ulysses): trains, evaluates, samples and checkpoints, matches the
// one-rank run step for step (the data-parallel size counts data replicas,
// so the batch and the data are the one rank's), and its checkpoint resumes
// in one process; a model whose heads Ulysses cannot split is refused before
// training, naming the key and the numbers.
#include <gtest/gtest.h>

#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string train_args(const std::string& dir, const std::string& config, int steps, const std::string& log,
                       const std::string& model = "--model tiny-llama --set layers=2 --set max_seq_len=32") {
  return kBin + "/stratum-train --config " + config + " " + model + " --data default --cache-dir " + dir +
         "/cache --steps " + std::to_string(steps) +
         " --eval-every 2 --eval-batches 1 --sample-tokens 8 --print-every 1 --log-dir " + dir + "/" + log;
}

std::string cp_config(int cp, const std::string& method) {
  return R"({"train_batch_size": 4, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "context_parallel": {"size": )" + std::to_string(cp) + R"(, "method": ")" + method + R"("}})";
}

}  // namespace

TEST_F(TrainCli, ContextParallelMatchesOneRankAndResumesInOneProcess) {
  const std::string one = write_file(dir_, "one.json", cp_config(1, "ring"));
  Result r = run(kBin + "/stratum-run --num_procs 1 " + train_args(dir_, one, 4, "one_log"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto one_losses = losses(dir_ + "/one_log/metrics.csv");
  ASSERT_EQ(one_losses.size(), 4u);
  for (const std::string method : {"ring", "ulysses"}) {
    const std::string cp2 = write_file(dir_, method + ".json", cp_config(2, method));
    r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, cp2, 4, method + "_log") + " --save-dir " + dir_ +
            "/" + method + "_ckpt --save-every 2");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("x 1 data-parallel | each sequence over 2 context-parallel ranks (" + method + ")"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("step 4/4 | loss"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--- sample (8 tokens"), std::string::npos) << r.output;
    const auto cp_losses = losses(dir_ + "/" + method + "_log/metrics.csv");
    ASSERT_EQ(cp_losses.size(), 4u);
    for (const auto& [step, loss] : one_losses)
      EXPECT_NEAR(cp_losses.at(step), loss, 1e-5 * loss) << method << " step " << step;
  }
  r = run(kBin + "/stratum-run --num_procs 1 " + train_args(dir_, one, 4, "resumed_log") + " --save-dir " + dir_ +
          "/ring_ckpt --resume-tag global_step2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
}

TEST_F(TrainCli, ContextParallelHeadsUlyssesCannotSplitAreRefused) {
  const std::string config = write_file(dir_, "cp.json", cp_config(2, "ulysses"));
  Result r = run(kBin + "/stratum-run --num_procs 2 " +
                 train_args(dir_, config, 2, "log", "--model tiny-llama --set max_seq_len=32 --set kv_heads=1"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("context_parallel.size: Ulysses over 2 ranks splits the heads, but the model has 4 query "
                          "and 1 key/value heads"),
            std::string::npos)
      << r.output;
}
