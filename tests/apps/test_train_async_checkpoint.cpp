// stratum-train with "checkpoint": {"async": true} on 2 CPU ranks: saves every
// 2 steps while training goes on, reports each save's bytes and seconds,
// writes the files a synchronous run writes, byte for byte, and resumes to
// the synchronous run's losses; a job that dies at any stage of a background
// save (STRATUM_CHECKPOINT_FAULT) leaves the previous checkpoint as `latest`,
// and --resume continues from it.
#include <gtest/gtest.h>

#include <fstream>

#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string config_text(bool async) {
  return std::string(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}})") +
         (async ? R"(, "checkpoint": {"async": true}})" : "}");
}

std::string train_args(const std::string& dir, const std::string& config, int steps, const std::string& log,
                       const std::string& ckpt) {
  return kBin + "/stratum-run --num_procs 2 " + kBin + "/stratum-train --config " + config +
         " --model gpt2-tiny-bytes --set layers=2 --set max_seq_len=32 --data default --cache-dir " + dir +
         "/cache --steps " + std::to_string(steps) + " --eval-every 0 --sample-tokens 0 --print-every 1 --log-dir " +
         dir + "/" + log + " --save-dir " + dir + "/" + ckpt + " --save-every 2";
}

std::string read_all(const std::string& path) {
  return stratum::fs::read_regular_file(path, size_t{1} << 30, "test file");
}

std::string latest(const std::string& ckpt) {
  std::string tag = read_all(ckpt + "/latest");
  while (!tag.empty() && tag.back() == '\n') tag.pop_back();
  return tag;
}

}  // namespace

TEST_F(TrainCli, AsyncCheckpointsMatchTheSynchronousRunAndResume) {
  const std::string sync = write_file(dir_, "sync.json", config_text(false));
  const std::string async = write_file(dir_, "async.json", config_text(true));
  Result r = run(train_args(dir_, sync, 6, "sync_log", "sync_ckpt"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(train_args(dir_, async, 6, "async_log", "async_ckpt"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* tag : {"global_step2", "global_step4", "global_step6"})
    EXPECT_NE(r.output.find("saved checkpoint " + dir_ + "/async_ckpt/" + tag + " ("), std::string::npos)
        << tag << "\n" << r.output;
  EXPECT_NE(r.output.find("host staging"), std::string::npos) << r.output;
  EXPECT_EQ(latest(dir_ + "/async_ckpt"), "global_step6");

  const auto want = losses(dir_ + "/sync_log/metrics.csv"), got = losses(dir_ + "/async_log/metrics.csv");
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(got.size(), 6u);
  for (const auto& [step, loss] : want) EXPECT_DOUBLE_EQ(got.at(step), loss) << "step " << step;
  // The same files, byte for byte (the manifest holds no time).
  for (const char* tag : {"global_step2", "global_step4", "global_step6"}) {
    const std::string a = dir_ + "/sync_ckpt/" + tag, b = dir_ + "/async_ckpt/" + tag;
    const auto names = stratum::fs::list_directory(a);
    EXPECT_EQ(names, stratum::fs::list_directory(b)) << tag;
    EXPECT_GE(names.size(), 3u) << tag;  // two shards and the manifest at least
    for (const std::string& name : names) EXPECT_TRUE(read_all(a + "/" + name) == read_all(b + "/" + name)) << tag << "/" << name;
  }

  r = run(train_args(dir_, async, 6, "resumed_log", "async_ckpt") + " --resume-tag global_step2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
  const auto resumed = losses(dir_ + "/resumed_log/metrics.csv");
  for (int step = 3; step <= 6; ++step) EXPECT_DOUBLE_EQ(resumed.at(step), want.at(step)) << "step " << step;
}

// Every rank _exits at one stage of the save of global_step4 (global_step2 is
// published when that save starts): `latest` names global_step2, no
// global_step4 is published, and --resume continues from global_step2.
TEST_F(TrainCli, AsyncSaveKilledAtAnyStageLeavesThePreviousCheckpoint) {
  const std::string async = write_file(dir_, "async.json", config_text(true));
  for (const std::string stage : {"copy", "write", "publish"}) {
    const std::string ckpt = "ckpt_" + stage;
    Result r = run("env STRATUM_CHECKPOINT_FAULT=" + stage + ":exit:global_step4 " +
                   train_args(dir_, async, 6, "log_" + stage, ckpt));
    EXPECT_NE(r.status, 0) << stage << "\n" << r.output;
    EXPECT_NE(r.output.find("exiting at the " + stage + " stage of checkpoint global_step4"), std::string::npos)
        << r.output;
    EXPECT_EQ(latest(dir_ + "/" + ckpt), "global_step2") << stage;
    EXPECT_FALSE(stratum::fs::exists(dir_ + "/" + ckpt + "/global_step4/manifest.json")) << stage;
    EXPECT_FALSE(stratum::fs::exists(dir_ + "/" + ckpt + "/global_step6")) << stage;
  }
  Result r = run(train_args(dir_, async, 4, "resumed_log", "ckpt_write") + " --resume");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
  EXPECT_EQ(latest(dir_ + "/ckpt_write"), "global_step4");
}
