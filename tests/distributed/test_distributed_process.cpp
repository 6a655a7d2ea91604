// Whole-job behaviour of the runtime, run as real mpirun jobs: a collective
// that a peer never joins ends the job with a report instead of hanging.
#include <gtest/gtest.h>

#include "../common/run_command.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "stratum/distributed/communicator.h"

namespace {

using RunResult = stratum::test::CommandResult;
const char* kEnv = stratum::test::kMpiRootEnv;

RunResult run(const std::string& cmd) { return stratum::test::run_command(cmd); }

TEST(DistProcess, CollectiveTimeoutEndsTheJobNamingTheCollective) {
  RunResult r = run(std::string("timeout 60 ") + kEnv + "STRATUM_DISABLE_NCCL=1 STRATUM_COMM_TIMEOUT=1 " STRATUM_MPIEXEC " -np 2 " STRATUM_BIN_DIR "/timeout_probe");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] error: all_reduce #1 (4.0 KiB Float) on mpi group 'world' [ranks 0, 1] timed out"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
}

// The NCCL watchdog on GPU machines (skipped without GPUs): the first collective
// blocks the host until the peer connects, and must still be reported.
TEST(DistProcess, NcclTimeoutEndsTheJobNamingTheCollective) {
  RunResult r = run(std::string("timeout 60 ") + kEnv + "STRATUM_COMM_TIMEOUT=2 " STRATUM_MPIEXEC " -np 2 " STRATUM_BIN_DIR
                    "/timeout_probe nccl");
  if (r.status == 3) GTEST_SKIP() << "no NCCL communicator here (no GPUs)";
  EXPECT_EQ(r.status, 124) << r.output;
  EXPECT_NE(r.output.find("all_reduce #1 (4.0 KiB Float) on nccl group 'world' [ranks 0, 1] timed out"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
}

TEST(DistProcess, TimeoutFromEnvironment) {
  setenv("STRATUM_COMM_TIMEOUT", "2.5", 1);
  EXPECT_EQ(stratum::distributed::CommOptions::from_env().timeout.count(), 2500);
  setenv("STRATUM_COMM_TIMEOUT", "soon", 1);
  EXPECT_THROW(stratum::distributed::CommOptions::from_env(), stratum::Error);
  unsetenv("STRATUM_COMM_TIMEOUT");
  EXPECT_EQ(stratum::distributed::CommOptions::from_env().timeout, std::chrono::minutes(10));
}

TEST(DistProcess, SingleProcessWithoutLauncher) {
  RunResult r = run(std::string("timeout 100 ") + kEnv + STRATUM_BIN_DIR "/test_collectives --gtest_brief=1");
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
