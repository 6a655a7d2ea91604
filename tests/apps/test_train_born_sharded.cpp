// Models born sharded, as a user starts them: gpt2-350m at 4 pipeline stages
// x 2 tensor-parallel ranks on 8 CPU ranks trains, and no rank's start-up
// peak (its resident high-water mark once the engine holds the model, which
// stratum-train prints) comes near what one rank held when every rank built
// the whole model first (2.20 GiB a rank; one process of the whole model:
// 6.18 GiB).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "train_cli.h"

using namespace stratum::test::train_cli;

TEST_F(TrainCli, Gpt2_350mAtPipeline4xTensor2StartsWithEachRankHoldingItsShare) {
  const std::string config = dir_ + "/pp4_tp2.json";
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.0003}},
    "pipeline": {"stages": 4}, "tensor_parallel": {"autotp_size": 2}})";
  Result r = run(kBin + "/stratum-run --num_procs 8 " + kBin + "/stratum-train --config " + config +
                 " --model gpt2-350m --set max_seq_len=64 --data default --cache-dir " + dir_ +
                 "/cache --steps 1 --eval-every 0 --sample-tokens 0 --print-every 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("step 1/1 | loss"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(start-up peak memory ([0-9.]+) GiB \(rank ([0-9]+); the smallest rank's ([0-9.]+) GiB\))")))
      << r.output;
  const double largest = std::stod(m[1]), smallest = std::stod(m[3]);
  std::cout << "gpt2-350m PP 4 x TP 2, start-up peak: largest rank " << largest << " GiB (rank " << m[2]
            << "), smallest " << smallest << " GiB\n";
  EXPECT_LT(largest, 1.5) << "a rank's start-up peak: its share (about 1.1 GiB with Adam's states) plus one layer; "
                             "every rank building the whole model first took 2.20 GiB";
}
