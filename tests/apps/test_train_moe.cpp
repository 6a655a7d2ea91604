// stratum-train with a mixture of experts: tiny Mixtral with its experts over
// 2 expert-parallel ranks trains, evaluates and samples, shows the experts'
// load on its progress line, matches the one-rank run step for step, and its
// checkpoint (each expert once) resumes in one process and exports as a
// MixtralForCausalLM directory that --init-from reads back; a moe section
// for a dense model is refused naming the key.
#include <gtest/gtest.h>

#include <fstream>

#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string train_args(const std::string& dir, const std::string& config, int steps, const std::string& log,
                       const std::string& model = "--model tiny-mixtral --set layers=2 --set max_seq_len=32") {
  return kBin + "/stratum-train --config " + config + " " + model + " --data default --cache-dir " + dir +
         "/cache --steps " + std::to_string(steps) +
         " --eval-every 2 --eval-batches 1 --sample-tokens 8 --print-every 1 --log-dir " + dir + "/" + log;
}

std::string moe_config(int ep) {
  return R"({"train_batch_size": 8, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "moe": {"expert_parallel_size": )" + std::to_string(ep) +
         R"(, "load_balancing": "seq_aux_loss", "aux_loss_coeff": 0.01, "z_loss_coeff": 0.001}})";
}

}  // namespace

TEST_F(TrainCli, MixtureOfExpertsTrainsOverExpertParallelRanksAndResumesInOneProcess) {
  const std::string ep2 = write_file(dir_, "ep2.json", moe_config(2));
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, ep2, 4, "ep2_log") + " --save-dir " + dir_ +
                 "/ckpt --save-every 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("x 2 data-parallel | experts over 2 expert-parallel ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("experts max/mean"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 4/4 | loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--- sample (8 tokens"), std::string::npos) << r.output;

  // One rank, every expert: the same losses (the per-sequence auxiliary loss and the z-loss are means over
  // sequences and tokens, which the data-parallel mean keeps).
  const std::string one = write_file(dir_, "one.json", moe_config(1));
  r = run(kBin + "/stratum-run --num_procs 1 " + train_args(dir_, one, 4, "one_log"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto ep_losses = losses(dir_ + "/ep2_log/metrics.csv"), one_losses = losses(dir_ + "/one_log/metrics.csv");
  ASSERT_EQ(ep_losses.size(), 4u);
  ASSERT_EQ(one_losses.size(), 4u);
  for (const auto& [step, loss] : one_losses) EXPECT_NEAR(ep_losses.at(step), loss, 1e-5 * loss) << "step " << step;
  // metrics.csv's 11th column: the step's largest expert load over the mean, the same at both layouts.
  const auto ep_load = metric(dir_ + "/ep2_log/metrics.csv", 10), one_load = metric(dir_ + "/one_log/metrics.csv", 10);
  ASSERT_EQ(ep_load.size(), 4u);
  for (const auto& [step, load] : one_load) {
    EXPECT_GE(load, 1.0);
    EXPECT_NEAR(ep_load.at(step), load, 1e-9) << "step " << step;
  }

  r = run(kBin + "/stratum-ckpt info " + dir_ + "/ckpt --tag global_step4");
  EXPECT_EQ(r.status, 0) << r.output;
  r = run(kBin + "/stratum-run --num_procs 1 " + train_args(dir_, one, 4, "resumed_log") + " --save-dir " + dir_ +
          "/ckpt --resume-tag global_step2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
  r = run(kBin + "/stratum-ckpt export " + dir_ + "/ckpt " + dir_ + "/hf --tag global_step4");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream config_json(dir_ + "/hf/config.json");
  const std::string text((std::istreambuf_iterator<char>(config_json)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("MixtralForCausalLM"), std::string::npos) << text;
  r = run(kBin + "/stratum-run --num_procs 2 " +
          train_args(dir_, ep2, 2, "init_log", "--init-from " + dir_ + "/hf --set max_seq_len=32"));
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(TrainCli, MoeSectionForADenseModelIsRefused) {
  const std::string config = write_file(dir_, "moe.json", moe_config(1));
  Result r = run(kBin + "/stratum-run --num_procs 1 " +
                 train_args(dir_, config, 2, "log", "--model tiny-llama --set max_seq_len=32"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the \"moe\" section is given but model 'tiny-llama' (llama) is dense"), std::string::npos)
      << r.output;
}
