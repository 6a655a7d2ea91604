// stratum-train with pipeline.stages: the seed guide's first config (4 stages,
// ZeRO-2 with the optimizer on the host, fp16; DeepSpeed refuses ZeRO-2 under
// a pipeline) trains on 4 CPU ranks and the progress line, printed by the last
// stage, reports the measured bubble; its checkpoints resume at another
// layout and export; stages that do not divide the ranks are refused by name.
#include <gtest/gtest.h>

#include <fstream>

#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string write_config(const std::string& dir, const std::string& json) {
  const std::string path = dir + "/ds_config.json";
  std::ofstream(path) << json;
  return path;
}

std::string train_args(const std::string& dir, const std::string& config, int steps = 3) {
  return kBin + "/stratum-train --config " + config + " --model gpt2-tiny-bytes --set layers=4 --set max_seq_len=32" +
         " --data default --cache-dir " + dir + "/cache --steps " + std::to_string(steps) +
         " --eval-every 0 --sample-tokens 0 --print-every 1";
}

// The seed guide's ds_config.json, with an optimizer (the guide passes one in code).
const char* kSeedConfig = R"({"train_batch_size": 64, "gradient_accumulation_steps": 2, "fp16": {"enabled": true},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
  "pipeline": {"stages": 4, "partition_method": "parameters"},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})";

}  // namespace

TEST_F(TrainCli, SeedGuideConfigTrainsOnFourPipelineStages) {
  Result r = run(kBin + "/stratum-run --num_procs 4 " + train_args(dir_, write_config(dir_, kSeedConfig)));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline: 4 stages x 1 data-parallel, schedule 1f1b, 2 micro-batches a step"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 3/3 | loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| bubble "), std::string::npos) << r.output;
}

// The comms logger's summary on each stage lists its transfers to the next
// and previous stage beside the data-parallel and cross-stage reductions.
TEST_F(TrainCli, CommsLoggerListsTheStageTransfers) {
  const std::string config = write_config(dir_, R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW"}, "pipeline": {"stages": 2}, "comms_logger": {"enabled": true}})");
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, config, 2));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("communication summary at step 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("send"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recv"), std::string::npos) << r.output;
}

// The desync detector checks every collective of the stages' groups (the
// cross-stage norm and overflow reductions too) and lets a sound run finish.
TEST_F(TrainCli, DesyncDetectorRunsUnderAPipeline) {
  const std::string config = write_config(dir_, R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW"}, "pipeline": {"stages": 2}, "comms_logger": {"debug": true}})");
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, config, 2));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("step 2/2 | loss"), std::string::npos) << r.output;
}

// A stage killed mid-schedule: its peer waits in a receive; the launcher
// ends the job within seconds naming the dead rank, and nothing hangs.
TEST_F(TrainCli, RankKilledMidScheduleEndsTheJobNamingIt) {
  const std::string config = write_config(dir_, R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW"}, "pipeline": {"stages": 2}})");
  const std::string log = dir_ + "/train.log", script = dir_ + "/kill_rank1.sh";
  // Rank 1 (the last stage), found by its RANK in /proc/<pid>/environ, is killed once step 2 is printed.
  std::ofstream(script) << "(" << kBin << "/stratum-run --num_procs 2 " << train_args(dir_, config, 100000) << " > "
                        << log << " 2>&1; echo \"exit $?\" >> " << log << ") &\n"
                        << "for i in $(seq 600); do grep -q 'step 2/' " << log << " && break; sleep 0.1; done\n"
                        << "for p in $(pgrep -f 'stratum-train --config " << config << "'); do\n"
                        << "  tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx RANK=1 && kill -9 $p\n"
                        << "done\nwait\ncat " << log << "\n";
  Result r = run("bash " + script);
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("killed by signal 9 (SIGKILL)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("exit 0"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 120.0) << r.output;
}

// A stage that stops answering (SIGSTOP on the last stage at step 2): its peer
// ends the job at the collective timeout, naming its stage and what it waited for.
TEST_F(TrainCli, StalledStageEndsTheJobNamingWhatItsPeerWaitedFor) {
  const std::string config = write_config(dir_, R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW"}, "pipeline": {"stages": 2}})");
  const std::string log = dir_ + "/train.log", script = dir_ + "/stop_rank1.sh";
  std::ofstream(script) << "(STRATUM_COMM_TIMEOUT=3 " << kBin << "/stratum-run --num_procs 2 "
                        << train_args(dir_, config, 100000) << " > " << log << " 2>&1; echo \"exit $?\" >> " << log
                        << ") &\n"
                        << "for i in $(seq 600); do grep -q 'step 2/' " << log << " && break; sleep 0.1; done\n"
                        << "for p in $(pgrep -f 'stratum-train --config " << config << "'); do\n"
                        << "  tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx RANK=1 && kill -STOP $p\n"
                        << "done\nwait\ncat " << log << "\n";
  Result r = run("bash " + script);
  EXPECT_NE(r.output.find("[rank 0] error: pipeline stage 0: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timed out after 3.000 s"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("exit 0"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 60.0) << r.output;
}

TEST_F(TrainCli, PipelineStagesThatDoNotDivideTheRanksAreRefused) {
  const std::string config = write_config(dir_, R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"},
    "pipeline": {"stages": 3}})");
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, config));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline.stages: 3 stages do not divide the 2 ranks of the job"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 60.0);
}

// Saved at 2 stages, resumed at 2 stages and by the data-parallel path (one
// stage over 2 ranks), and exported as a Hugging Face model.
TEST_F(TrainCli, PipelineCheckpointResumesAtAnotherLayoutAndExports) {
  const std::string pipe = write_config(dir_, R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW"}, "pipeline": {"stages": 2}})");
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, pipe, 2) + " --save-dir " + dir_ + "/ckpt");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, pipe, 3) + " --save-dir " + dir_ + "/ckpt --resume");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("x 2 pipeline stages"), std::string::npos) << r.output;
  const std::string flat = dir_ + "/flat.json";
  std::ofstream(flat) << R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW"}})";
  r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, flat, 4) + " --save-dir " + dir_ + "/ckpt --resume");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 3"), std::string::npos) << r.output;
  r = run(kBin + "/stratum-ckpt export " + dir_ + "/ckpt " + dir_ + "/hf --tag global_step3");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(stratum::fs::exists(dir_ + "/hf/model.safetensors")) << r.output;
}
