// The comms logger's desync detector as a whole job sees it: desync_probe run
// under mpirun, where rank 1 issues a different collective (or none), must end
// within seconds with a report naming the collective and every rank's call.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "stratum/dist/desync_check.h"

namespace {

struct RunResult {
  int status;
  std::string output;
  double seconds;
};

// Root may run Open MPI here (tests run as root on CI machines).
const char* kEnv = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

RunResult run(const std::string& cmd) {
  auto t0 = std::chrono::steady_clock::now();
  RunResult r{-1, "", 0};
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

RunResult run_probe(int np, const std::string& args = "", const std::string& timeout_s = "30") {
  return run(std::string("timeout 60 ") + kEnv + "STRATUM_COMM_TIMEOUT=" + timeout_s + " " STRATUM_MPIEXEC " -np " +
             std::to_string(np) + " " STRATUM_BIN_DIR "/desync_probe " + args);
}

TEST(DesyncProcess, TwoRanksReportTheMismatchAndEndTheJob) {
  RunResult r = run_probe(2);
  EXPECT_EQ(r.status, stratum::dist::kExitDesync) << r.output;
  EXPECT_NE(r.output.find("error: desync on group 'world' [ranks 0, 1] at collective #3: "
                          "rank 0 issued all_reduce (4.0 KiB Float, sum); rank 1 issued all_gather (8.0 KiB Float)"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;  // the collective timeout (30 s) never came into it
}

TEST(DesyncProcess, ThreeRanksNameEveryRanksCall) {
  RunResult r = run_probe(3);
  EXPECT_EQ(r.status, stratum::dist::kExitDesync) << r.output;
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
