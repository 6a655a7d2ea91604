// stratum-config check: exit 0 and the resolved config, or exit 1 and every problem.
#include <gtest/gtest.h>

#include "../common/run_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace {

using RunResult = stratum::test::CommandResult;

RunResult run(const std::string& args) {
  return stratum::test::run_command(std::string(STRATUM_BIN_DIR) + "/stratum-config " + args);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string p = std::string(tmp && *tmp ? tmp : "/tmp") + "/stratum_cli_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(p) << text;
  return p;
}

const char* kUserConfig = R"({"train_batch_size": 64, "gradient_accumulation_steps": 2,
  "fp16": {"enabled": true}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
  "pipeline": {"stages": 4, "partition_method": "parameters"}})";

TEST(StratumConfigCli, ValidConfigResolvesTheBatchForAWorldSize) {
  std::string p = write_temp("user.json", kUserConfig);
  RunResult r = run("check " + p + " --world-size 8");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"train_micro_batch_size_per_gpu\": 16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("micro 16 x accumulation 2 x data-parallel 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": OK"), std::string::npos) << r.output;
  std::remove(p.c_str());
}

TEST(StratumConfigCli, WithoutWorldSizePrintsTheConfigAsWritten) {
  std::string p = write_temp("plain.json", R"({"train_batch_size": 8, "bf16": {"enabled": true}})");
  RunResult r = run("check " + p);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"bf16\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--world-size"), std::string::npos) << r.output;
  std::remove(p.c_str());
}

TEST(StratumConfigCli, InvalidConfigPrintsEveryProblemAndExits1) {
  std::string p = write_temp("bad.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 4},
      "fp16": {"enabled": true}, "bf16": {"enabled": true}, "optimizr": {}})");
  RunResult r = run("check " + p);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("zero_optimization.stage: expected 0..3, got 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optimizr: unknown key (did you mean 'optimizer'?)"), std::string::npos) << r.output;
  std::remove(p.c_str());
}

// The seed guide's config has no optimizer (DeepSpeed takes the script's):
// check accepts it, as the engine does, and notes what training will use.
TEST(StratumConfigCli, ConfigWithoutAnOptimizerNotesTheDefaultTheEngineUses) {
  std::string p = write_temp("seed.json", kUserConfig);
  RunResult r = run("check " + p + " --world-size 8");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("note: optimizer: not set; training uses AdamW at the section's defaults (lr 0.001"),
            std::string::npos)
      << r.output;
  std::remove(p.c_str());
}

TEST(StratumConfigCli, BatchThatDoesNotFitTheWorldExits1) {
  std::string p = write_temp("user2.json", kUserConfig);
  RunResult r = run("check " + p + " --world-size 6");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("world size 6 is not a multiple of pipeline.stages (4)"), std::string::npos) << r.output;
  std::remove(p.c_str());
}

// With --world-size the process grid's shape is checked, in the engine's words,
// each problem on its own line: what check accepts, training starts.
TEST(StratumConfigCli, GridThatDoesNotFitTheWorldExits1WithTheEnginesMessages) {
  const std::string stages = write_temp("stages.json", R"({"train_batch_size": 8, "pipeline": {"stages": 3}})");
  RunResult r = run("check " + stages + " --world-size 4");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("\n  pipeline.stages: 3 stages do not divide the 4 ranks of the job; use a divisor of 4\n"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(": OK"), std::string::npos) << r.output;

  const std::string tp = write_temp("tp.json", R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 3}})");
  r = run("check " + tp + " --world-size 4");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("\n  tensor_parallel.autotp_size: 3 does not divide the 4 ranks of the job; use a divisor "
                          "of 4\n"),
            std::string::npos) << r.output;

  const std::string both =
      write_temp("both.json", R"({"train_batch_size": 8, "pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 3}})");
  r = run("check " + both + " --world-size 8");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("pipeline.stages: 2 stages x tensor_parallel.autotp_size 3 = 6 do not divide the 8 ranks "
                          "of the job; with 2 stages use a tensor-parallel size dividing 4"),
            std::string::npos) << r.output;
  // The same shapes fit another world.
  EXPECT_EQ(run("check " + stages + " --world-size 6").status, 0);
  EXPECT_EQ(run("check " + tp + " --world-size 6").status, 0);
  for (const auto& p : {stages, tp, both}) std::remove(p.c_str());
}

TEST(StratumConfigCli, MissingFileExits1) {
  RunResult r = run("check /nonexistent/ds_config.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/nonexistent/ds_config.json"), std::string::npos) << r.output;
}

TEST(StratumConfigCli, NoSubcommandIsAUsageError) {
  RunResult r = run("");
  EXPECT_NE(r.status, 0);
}

}  // namespace

TEST(StratumConfigCli, SchedulePrintsTheTableAndBubble) {
  RunResult r = run("schedule --stages 2 --micro-batches 3 --schedule 1f1b");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 | F0 F1 .  .  B0 B0 F2 B1 B1 .  B2 B2\nrank 1 | .  F0 B0 B0 F1 B1 B1 F2 B2 B2 .  . "),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bubble 33.3333% of the compute; peak activations by stage: 2 1"), std::string::npos)
      << r.output;
  r = run("schedule --stages 4 --micro-batches 6 --schedule interleaved --virtual-stages 2");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("6 micro-batches (gradient_accumulation_steps) is not a multiple of the 4 stages"),
            std::string::npos) << r.output;
}
