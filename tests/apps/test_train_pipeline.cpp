// stratum-train with pipeline.stages: the seed guide's first config (4 stages,
// ZeRO-2 with the optimizer on the host, fp16; DeepSpeed refuses ZeRO-2 under
// a pipeline) trains on 4 CPU ranks and the progress line reports the
// measured bubble; a pipeline trains, evaluates and samples as the single
// process does, with every diagnostic the data-parallel path has; its
// checkpoints resume at another layout and export; stages that do not divide
// the ranks are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <nlohmann/json.hpp>

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
  // The flight recorder's report names the stopped stage: short of the sends
  // rank 0 waits for, behind on the collective rank 0 waits in (stopped
  // between steps, where the stages share the loss), or, stopped inside its
  // send, by its file going stale.
  EXPECT_NE(r.output.find("[rank 0] error: flight recorder: files of 2 of 2 ranks in "), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("not arrived: rank 1 \\((had sent \\d+ of the \\d+ messages "
                                                     "rank 0 waits for|at #\\d+|no op on this group)|rank 1's file "
                                                     "stopped being rewritten")))
      << r.output;
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

namespace {
// "step 3: eval loss 5.123456" -> 5.123456 (NaN when absent).
double eval_loss_of(const std::string& output) {
  const std::string tag = "step 3: eval loss ";
  const size_t at = output.find(tag);
  return at == std::string::npos ? std::nan("") : std::stod(output.substr(at + tag.size()));
}
std::string sample_of(const std::string& output) {
  const size_t begin = output.find("--- sample"), end = output.find("--- end of sample ---");
  return begin == std::string::npos || end == std::string::npos ? "" : output.substr(begin, end - begin);
}
}  // namespace

// One engine, one loop: 2 stages (ZeRO-3 over 2 data-parallel ranks too)
// train as the single process does (losses within 1e-4), evaluate on the
// held-out data to the same loss, and generate the same greedy sample; with
// wall_clock_breakdown (every stage's lines, named), the flops profile (rank
// 0's stage), TensorBoard events and the comms logger's tensor-parallel rows.
TEST_F(TrainCli, PipelineTrainsEvaluatesAndSamplesAsTheSingleProcess) {
  auto config = [&](const std::string& name, const nlohmann::json& extra) {
    nlohmann::json c = {{"train_micro_batch_size_per_gpu", 2},
                        {"gradient_accumulation_steps", 2},
                        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.003}}}}}};
    c.update(extra);
    std::ofstream(dir_ + "/" + name + ".json") << c.dump();
    return dir_ + "/" + name + ".json";
  };
  auto train = [&](const std::string& name, int ranks, const nlohmann::json& extra) {
    return run(kBin + "/stratum-run --num_procs " + std::to_string(ranks) + " " + kBin + "/stratum-train --config " +
               config(name, extra) + " --model gpt2-tiny-bytes --set layers=4 --set max_seq_len=32 --data default " +
               "--cache-dir " + dir_ + "/cache --steps 3 --eval-every 3 --eval-batches 2 --sample-tokens 24 " +
               "--temperature 0 --print-every 1 --log-dir " + dir_ + "/" + name + "_log");
  };
  Result single = train("single", 1, nlohmann::json::object());
  ASSERT_EQ(single.status, 0) << single.output;
  Result pp = train("pp", 2, {{"pipeline", {{"stages", 2}}},
                              {"wall_clock_breakdown", true},
                              {"steps_per_print", 1},
                              {"flops_profiler", {{"enabled", true}, {"profile_step", 1}}},
                              {"tensorboard", {{"enabled", true}, {"output_path", dir_ + "/tb"}, {"job_name", "pp"}}}});
  ASSERT_EQ(pp.status, 0) << pp.output;
  // ZeRO-3 at 2 stages x 2 data-parallel: each rank a quarter of the batch; the same global batch.
  Result z3 = train("z3", 4, {{"train_micro_batch_size_per_gpu", 1},
                              {"pipeline", {{"stages", 2}}},
                              {"zero_optimization", {{"stage", 3}}}});
  ASSERT_EQ(z3.status, 0) << z3.output;
  const auto want = losses(dir_ + "/single_log/metrics.csv");
  ASSERT_EQ(want.size(), 3u) << single.output;
  for (const auto& [name, r] : std::map<std::string, const Result*>{{"pp", &pp}, {"z3", &z3}}) {
    const auto got = losses(dir_ + "/" + name + "_log/metrics.csv");
    ASSERT_EQ(got.size(), 3u) << r->output;
    for (const auto& [step, loss] : want)
      EXPECT_NEAR(got.at(step), loss, 1e-4 * loss) << name << " step " << step;
    EXPECT_NEAR(eval_loss_of(r->output), eval_loss_of(single.output), 1e-4 * eval_loss_of(single.output))
        << name << "\n" << r->output;
    EXPECT_FALSE(sample_of(single.output).empty()) << single.output;
    EXPECT_EQ(sample_of(r->output), sample_of(single.output)) << name;
  }
  EXPECT_NE(pp.output.find("[rank 0] time (ms) | fwd_microstep: "), std::string::npos) << pp.output;
  EXPECT_NE(pp.output.find("[rank 1] pipeline stage 1: time (ms) | fwd_microstep: "), std::string::npos) << pp.output;
  EXPECT_NE(pp.output.find("Profile Summary at step 1:"), std::string::npos) << pp.output;
  EXPECT_NE(pp.output.find("(layers.0): GPT2Embedding("), std::string::npos) << pp.output;
  EXPECT_EQ(pp.output.find("(layers.5)"), std::string::npos) << "rank 0 profiles its own stage\n" << pp.output;
  bool events = false;
  for (const auto& f : std::filesystem::directory_iterator(dir_ + "/tb/pp"))
    events |= f.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_TRUE(events) << "no TensorBoard events in " << dir_ << "/tb/pp";
}

// The comms logger's summary under PP x TP: the stage transfers and the
// model's own tensor-parallel collectives in the one summary.
TEST_F(TrainCli, CommsLoggerListsTensorParallelAndStageRowsTogether) {
  const std::string config = write_config(dir_, R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW"}, "pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 2},
    "comms_logger": {"enabled": true}})");
  Result r = run(kBin + "/stratum-run --num_procs 4 " + train_args(dir_, config, 2));
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t summary = r.output.find("communication summary at step 2");
  ASSERT_NE(summary, std::string::npos) << r.output;
  const std::string rows = r.output.substr(summary);
  for (const char* op : {"all_reduce", "send", "recv"}) EXPECT_NE(rows.find(op), std::string::npos) << op << "\n" << rows;
}

