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
  // Plain mpirun, no STRATUM_FLIGHT_DIR: the rank's own flight recorder.
  EXPECT_NE(r.output.find("[rank 0] error: flight recorder (set STRATUM_FLIGHT_DIR for every rank's"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("    all_reduce #1 on 'world' 4.0 KiB: OPEN, blocked in it for "), std::string::npos)
      << r.output;
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

// One rank failing while its peer waits in a collective ends the whole job
// within seconds, naming that rank and its error (the collective timeout is
// 60 s here: a job that waits for it fails the time check).
RunResult run_probe(const std::string& mode, const std::string& launcher_flags = "") {
  return run(std::string("timeout 90 ") + kEnv + "STRATUM_DISABLE_NCCL=1 STRATUM_COMM_TIMEOUT=60 " STRATUM_BIN_DIR
             "/stratum-run --num_procs 2 " + launcher_flags + " " STRATUM_BIN_DIR "/rank_failure_probe " + mode);
}

TEST(DistProcess, LoneRankErrorAbortsTheJobNamingTheRank) {
  RunResult r = run_probe("lone-error");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] error: data shard 7 is unreadable"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stratum-run: job failed: rank 1 (host localhost, local rank 1)"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 15.0) << r.output;
}

TEST(DistProcess, AgreedErrorEndsEveryRankCleanlyNamingTheFailingOne) {
  RunResult r = run_probe("agreed-error");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("[rank 1] error: data shard 7 is unreadable"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank 0] error"), std::string::npos) << r.output;  // rank 0 did not fail
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;       // no abort needed
  EXPECT_NE(r.output.find("stratum-run: job failed: rank 1 (host localhost, local rank 1) exited with status 1"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 15.0) << r.output;
}

TEST(DistProcess, HeartbeatTimeoutEndsAJobWhoseRankHangs) {
  RunResult r = run_probe("hang", "--heartbeat_timeout 3");
  EXPECT_EQ(r.status, 124) << r.output;
  // Rank 0 waits in its all_reduce (and keeps beating): rank 1 is the one named.
  EXPECT_NE(r.output.find("stratum-run: job failed: rank 1 (host localhost, local rank 1) made no progress for 3 s"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0 (host localhost, local rank 0) made no progress"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
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
