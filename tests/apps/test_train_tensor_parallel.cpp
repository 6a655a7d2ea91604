// stratum-train with tensor_parallel.autotp_size: TP = 2 with sequence
// parallelism trains on 2 CPU ranks, evaluates and samples (every rank of the
// group in step), its checkpoint resumes by the data-parallel path and
// exports whole; the loss it reports matches the whole model's run step for
// step; a model the group cannot split is refused naming the numbers.
#include <gtest/gtest.h>

#include <fstream>

#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string train_args(const std::string& dir, const std::string& config, int steps, const std::string& log) {
  return kBin + "/stratum-train --config " + config + " --model gpt2-tiny-bytes --set layers=2 --set max_seq_len=32" +
         " --data default --cache-dir " + dir + "/cache --steps " + std::to_string(steps) +
         " --eval-every 2 --eval-batches 1 --sample-tokens 8 --print-every 1 --log-dir " + dir + "/" + log;
}

const char* kTensorParallel = R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true}})";
// The whole model: the same batch (2 sequences x 2 micro-batches a step) on the data-parallel path.
const char* kWhole = R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})";

}  // namespace

TEST_F(TrainCli, TensorParallelTrainsResumesAndMatchesTheWholeModel) {
  const std::string tp = write_file(dir_, "tp.json", kTensorParallel);
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, tp, 4, "tp_log") + " --save-dir " + dir_ +
                 "/ckpt --save-every 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("x 1 data-parallel | tensor parallel 2 with sequence parallelism"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 4/4 | loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("eval loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--- sample (8 tokens"), std::string::npos) << r.output;

  // The whole model, one rank, same seed and batch: the same losses.
  const std::string whole = write_file(dir_, "whole.json", kWhole);
  r = run(kBin + "/stratum-run --num_procs 1 " + train_args(dir_, whole, 4, "whole_log"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto tp_losses = losses(dir_ + "/tp_log/metrics.csv"), whole_losses = losses(dir_ + "/whole_log/metrics.csv");
  ASSERT_EQ(tp_losses.size(), 4u);
  ASSERT_EQ(whole_losses.size(), 4u);
  for (const auto& [step, loss] : whole_losses)
    EXPECT_NEAR(tp_losses.at(step), loss, 1e-5 * loss) << "step " << step;

  r = run(kBin + "/stratum-ckpt info " + dir_ + "/ckpt --tag global_step4");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 data-parallel ranks x 2 tensor-parallel ranks"), std::string::npos) << r.output;
  r = run(kBin + "/stratum-ckpt export " + dir_ + "/ckpt " + dir_ + "/hf --tag global_step4");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(stratum::fs::exists(dir_ + "/hf/model.safetensors")) << r.output;
  // Resumed from step 2 by two data-parallel ranks of the whole model.
  r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, whole, 4, "resumed_log") + " --save-dir " + dir_ +
          "/ckpt --resume-tag global_step2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("x 2 tensor-parallel ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
}

TEST_F(TrainCli, TensorParallelModelThatCannotSplitIsRefused) {
  const std::string config = write_file(dir_, "tp.json", kTensorParallel);
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, config, 2, "log") + " --set heads=3 --set hidden=96");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("heads 3 is not divisible by the tensor-parallel size 2"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 60.0);
}

// Tensor parallelism inside pipeline stages (PP x TP = 2 x 2 on 4 CPU ranks,
// sequence parallel, ZeRO-1): trains, and its checkpoint resumes at TP = 2
// on the data-parallel path.
TEST_F(TrainCli, PipelineTimesTensorParallelTrainsAndResumesWithoutThePipeline) {
  const std::string both = write_file(dir_, "pp_tp.json", R"({"train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "zero_optimization": {"stage": 1}, "pipeline": {"stages": 2},
    "tensor_parallel": {"autotp_size": 2, "sequence_parallel": true}})");
  Result r = run(kBin + "/stratum-run --num_procs 4 " + train_args(dir_, both, 2, "pp_tp_log") + " --save-dir " +
                 dir_ + "/ckpt");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline: 2 stages x 1 data-parallel x 2 tensor-parallel"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" GiB (rank "), std::string::npos) << "the largest rank's memory: " << r.output;
  EXPECT_NE(r.output.find("step 2/2 | loss"), std::string::npos) << r.output;
  const std::string tp = write_file(dir_, "tp.json", kTensorParallel);
  r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, tp, 3, "tp_log") + " --save-dir " + dir_ +
          "/ckpt --resume");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("x 2 pipeline stages x 2 tensor-parallel ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
}
