// stratum-train with the comms logger on, as the seed guide advises for finding
// communication bottlenecks: the summary in DeepSpeed's layout every
// steps_per_print steps (verbose) and at the end, and the desync check ending a
// job whose ranks disagree (here: two ranks built with different models).
#include <gtest/gtest.h>

#include <fstream>

#include "stratum/distributed/desync_check.h"
#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string write_config(const std::string& dir, const std::string& extra) {
  const std::string path = dir + "/ds_config.json";
  std::ofstream(path) << R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"},
    "zero_optimization": {"stage": 2}, "steps_per_print": 2, )"
                      << extra << "}";
  return path;
}

std::string train_args(const std::string& dir, const std::string& config, const std::string& layers = "2",
                       int steps = 4) {
  return kBin + "/stratum-train --config " + config + " --model gpt2-tiny-bytes --set layers=" + layers +
         " --data default --cache-dir " + dir + "/cache --steps " + std::to_string(steps) +
         " --eval-every 0 --sample-tokens 0";
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_F(TrainCli, CommsLoggerPrintsDeepSpeedsSummaryEveryPrintStepAndAtTheEnd) {
  const std::string config =
      write_config(dir_, R"("comms_logger": {"enabled": true, "verbose": true, "prof_all": false, "prof_ops": ["reduce_scatter"]},
                            "dump_state": true)");
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, config));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resolved config"), std::string::npos) << "dump_state\n" << r.output;
  EXPECT_NE(r.output.find("communication summary at step 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("communication summary at step 4"), std::string::npos) << r.output;
  EXPECT_GE(count(r.output, "Comm. Op"), 2u) << r.output;
  EXPECT_NE(r.output.find("reduce_scatter"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("comm op: reduce_scatter | time (ms):"), std::string::npos) << "verbose lines\n" << r.output;
  EXPECT_EQ(r.output.find("comm op: all_gather"), std::string::npos) << "prof_ops limits what is profiled\n" << r.output;
}

TEST_F(TrainCli, CommsLoggerWithoutVerbosePrintsTheSummaryOnceAtTheEnd) {
  const std::string config = write_config(dir_, R"("comms_logger": {"enabled": true})");
  Result r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, config));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "Comm. Op"), 1u) << r.output;
  EXPECT_NE(r.output.find("communication summary at step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all_gather"), std::string::npos) << r.output;
}

TEST_F(TrainCli, CommsLoggerDebugEndsAJobWhoseRanksDisagreeNamingThem) {
  const std::string config = write_config(dir_, R"("comms_logger": {"debug": true})");
  // Prepare the data first, so that both ranks reach training.
  ASSERT_EQ(run(train_args(dir_, config, "2", 0)).status, 0);
  Result r = run(std::string("timeout 120 ") + stratum::test::kMpiRootEnv + "STRATUM_COMM_TIMEOUT=60 " +
                 STRATUM_MPIEXEC + " -np 1 " + train_args(dir_, config, "2") + " : -np 1 " +
                 train_args(dir_, config, "3"));
  EXPECT_EQ(r.status, stratum::distributed::kExitDesync) << r.output;
  EXPECT_NE(r.output.find("desync on group"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 issued"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 issued"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 50.0) << "ended by the check, not by the 60 s collective timeout\n" << r.output;
}
