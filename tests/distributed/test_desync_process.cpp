// The comms logger's desync detector as a whole job sees it: desync_probe run
// under mpirun, where rank 1 issues a different collective (or none), must end
// within seconds with a report naming the collective and every rank's call.
#include <gtest/gtest.h>

#include "../common/run_command.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "stratum/distributed/desync_check.h"

namespace {

using RunResult = stratum::test::CommandResult;
const char* kEnv = stratum::test::kMpiRootEnv;

RunResult run(const std::string& cmd) { return stratum::test::run_command(cmd); }

RunResult run_probe(int np, const std::string& args = "", const std::string& timeout_s = "30") {
  return run(std::string("timeout 60 ") + kEnv + "STRATUM_COMM_TIMEOUT=" + timeout_s + " " STRATUM_MPIEXEC " -np " +
             std::to_string(np) + " " STRATUM_BIN_DIR "/desync_probe " + args);
}

TEST(DesyncProcess, TwoRanksReportTheMismatchAndEndTheJob) {
  RunResult r = run_probe(2);
  EXPECT_EQ(r.status, stratum::distributed::kExitDesync) << r.output;
  EXPECT_NE(r.output.find("error: desync on group 'world' [ranks 0, 1] at collective #3: "
                          "rank 0 issued all_reduce (4.0 KiB Float, sum); rank 1 issued all_gather (8.0 KiB Float)"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;  // the collective timeout (30 s) never came into it
}

TEST(DesyncProcess, ThreeRanksNameEveryRanksCall) {
  RunResult r = run_probe(3);
  EXPECT_EQ(r.status, stratum::distributed::kExitDesync) << r.output;
  EXPECT_NE(r.output.find("desync on group 'world' [ranks 0, 1, 2] at collective #3: ranks 0, 2 issued "
                          "all_reduce (4.0 KiB Float, sum); rank 1 issued all_gather (12.0 KiB Float)"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
}

TEST(DesyncProcess, RankThatNeverArrivesIsReportedByTheTimeout) {
  RunResult r = run_probe(2, "missing", "1");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] error: desync check on group 'world': not every rank reached collective #3 "
                          "(this rank: all_reduce (4.0 KiB Float, sum)) within 1.000 s"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
}

}  // namespace
