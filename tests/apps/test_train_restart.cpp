// stratum-run --max_restarts with stratum-train: a rank killed, a rank hung, a
// corrupt newest checkpoint. Each time the job ends, starts again with --resume
// from the newest checkpoint that verifies, and finishes with the losses of a
// run that was never interrupted, step for step, bit for bit (same layout).
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

constexpr int kSteps = 40;

bool has(const Result& r, const std::string& s) { return r.output.find(s) != std::string::npos; }

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pid of rank `rank`'s stratum-train in the job whose command line names `dir` (0: none).
pid_t rank_pid(const std::string& dir, int rank) {
  DIR* proc = ::opendir("/proc");
  if (!proc) return 0;
  pid_t found = 0;
  const std::string want_env = "RANK=" + std::to_string(rank);
  while (dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string base = std::string("/proc/") + e->d_name;
    std::string cmd = slurp(base + "/cmdline");
    if (cmd.rfind(kBin + "/stratum-train", 0) != 0 || cmd.find(dir + "/ckpt") == std::string::npos) continue;
    std::string env = slurp(base + "/environ");
    size_t start = 0;
    for (size_t nul; (nul = env.find('\0', start)) != std::string::npos; start = nul + 1)
      if (env.compare(start, nul - start, want_env) == 0) found = pid;
    if (found) break;
  }
  ::closedir(proc);
  return found;
}

// The step of the checkpoint `latest` names (0: none yet).
int latest_step(const std::string& dir) {
  std::string tag = slurp(dir + "/ckpt/latest");
  const auto at = tag.find("global_step");
  return at == std::string::npos ? 0 : std::atoi(tag.c_str() + at + 11);
}

int metric_rows(const std::string& dir) {
  const std::string text = slurp(dir + "/log/metrics.csv");
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// Waits (up to 120 s) for `ready`; false when the run ended first.
template <class F>
bool wait_for(const std::future<Result>& run, F ready) {
  const auto t0 = std::chrono::steady_clock::now();
  while (since(t0) < 120) {
    if (ready()) return true;
    if (run.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) return false;
  }
  return false;
}

std::string restart_cmd(const std::string& dir, const std::string& launcher_flags) {
  std::string cmd = train_cmd(dir, kSteps, "--save-every 2 --sample-tokens 0");
  const std::string head = kBin + "/stratum-run --num_procs 2 ";
  return head + launcher_flags + " " + cmd.substr(head.size());
}

// The losses of a run never interrupted, once for every test.
const std::map<int, double>& straight_losses() {
  static const std::map<int, double> losses_ = [] {
    const std::string dir = stratum::fs::make_temp_directory("stratum_straight_");
    const Result r = run(train_cmd(dir, kSteps, "--save-every 2 --sample-tokens 0"));
    EXPECT_EQ(r.status, 0) << r.output;
    auto out = losses(dir + "/log/metrics.csv");
    stratum::fs::remove_tree(dir);
    return out;
  }();
  return losses_;
}

void expect_straight_losses(const std::string& dir) {
  const auto& want = straight_losses();
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  const auto got = losses(dir + "/log/metrics.csv");  // a step run twice: its last row, after the restart
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (int s = 1; s <= kSteps; ++s) EXPECT_EQ(got.at(s), want.at(s)) << "step " << s;
}

void flip_a_byte(const std::string& shard) {
  const auto header = stratum::io::read_safetensors_header(shard);
  const uint64_t at = 8 + header.header_length + header.tensors.front().begin + 2;
  const int fd = ::open(shard.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << shard;
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, static_cast<off_t>(at)), 1);
  byte ^= 0x01;
  ASSERT_EQ(::pwrite(fd, &byte, 1, static_cast<off_t>(at)), 1);
  ::close(fd);
}

}  // namespace

// kill -9 of rank 1 after the first checkpoint: the job restarts from it and
// finishes as if nothing happened. Prints the recovery time and its parts.
TEST_F(TrainCli, KilledRankRestartsFromTheLatestCheckpoint) {
  straight_losses();
  auto job = std::async(std::launch::async, [&] { return run(restart_cmd(dir_, "--max_restarts 2")); });
  ASSERT_TRUE(wait_for(job, [&] { return latest_step(dir_) >= 2 && rank_pid(dir_, 1) != 0; }))
      << "the run ended before its first checkpoint:\n" << job.get().output;
  const pid_t victim = rank_pid(dir_, 1);
  const int rows_before = metric_rows(dir_);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  // The restart's rank 1 is a new process; its first step a new metrics row.
  double relaunched = -1, first_step = -1;
  pid_t again = 0;
  if (wait_for(job, [&] { return (again = rank_pid(dir_, 1)) != 0 && again != victim; })) {
    relaunched = since(killed);
    const int rows = metric_rows(dir_);
    if (wait_for(job, [&] { return metric_rows(dir_) > rows; })) first_step = since(killed);
  }
  const Result r = job.get();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "stratum-run: attempt 1 of 3 failed: rank 1 (host localhost, local rank 1) killed by signal 9 "
                     "(SIGKILL) (mpirun exited with status"))
      << r.output;
  EXPECT_TRUE(has(r, "restarting (attempt 2 of 3) from the latest checkpoint in " + dir_ + "/ckpt")) << r.output;
  EXPECT_TRUE(has(r, "resumed at step ")) << r.output;
  EXPECT_FALSE(has(r, "attempt 2 of 3 failed")) << r.output;
  EXPECT_GT(metric_rows(dir_), rows_before);
  expect_straight_losses(dir_);
  std::printf("recovery: kill -9 -> rank relaunched %.2f s, -> first step after the restart %.2f s\n", relaunched,
              first_step);
  EXPECT_GT(first_step, 0);
  EXPECT_LE(first_step, 60.0);
}

// A rank that hangs (stopped: no heartbeat) is killed by its shim after
// --heartbeat_timeout; the job restarts and finishes.
TEST_F(TrainCli, HungRankIsKilledAndTheJobRestarts) {
  straight_losses();
  auto job = std::async(std::launch::async,
                        [&] { return run(restart_cmd(dir_, "--max_restarts 2 --heartbeat_timeout 3")); });
  ASSERT_TRUE(wait_for(job, [&] { return latest_step(dir_) >= 2 && rank_pid(dir_, 1) != 0; }))
      << "the run ended before its first checkpoint:\n" << job.get().output;
  ASSERT_EQ(::kill(rank_pid(dir_, 1), SIGSTOP), 0);
  const Result r = job.get();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "stratum-run: attempt 1 of 3 failed: rank 1 (host localhost, local rank 1) made no progress "
                     "for 3 s"))
      << r.output;
  EXPECT_TRUE(has(r, "restarting (attempt 2 of 3) from the latest checkpoint in " + dir_ + "/ckpt")) << r.output;
  EXPECT_TRUE(has(r, "resumed at step ")) << r.output;
  expect_straight_losses(dir_);
}

// The newest checkpoint corrupt when the job restarts: the resume skips it,
// saying why, and continues from the one before.
TEST_F(TrainCli, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  straight_losses();
  auto job = std::async(std::launch::async, [&] { return run(restart_cmd(dir_, "--max_restarts 1")); });
  ASSERT_TRUE(wait_for(job, [&] { return latest_step(dir_) >= 4 && rank_pid(dir_, 1) != 0; }))
      << "the run ended before its second checkpoint:\n" << job.get().output;
  // Stopped, the job saves nothing more: `latest` stays while its shard is spoilt.
  const pid_t victim = rank_pid(dir_, 1);
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int step = latest_step(dir_);
  const std::string tag = "global_step" + std::to_string(step);
  flip_a_byte(dir_ + "/ckpt/" + tag + "/rank_00000.safetensors");
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const Result r = job.get();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "attempt 1 of 2 failed: rank 1 (host localhost, local rank 1) killed by signal 9")) << r.output;
  EXPECT_TRUE(has(r, "--resume: skipping checkpoint " + dir_ + "/ckpt/" + tag + " ('latest'): it does not verify: " +
                         dir_ + "/ckpt/" + tag + "/rank_00000.safetensors: tensor '"))
      << r.output;
  EXPECT_TRUE(has(r, "resuming from global_step" + std::to_string(step - 2) + ", the newest checkpoint that does"))
      << r.output;
  EXPECT_TRUE(has(r, "resumed at step " + std::to_string(step - 2))) << r.output;
  expect_straight_losses(dir_);
}

// --exclude_failed_hosts: 4 ranks on two hosts (the second reached through a
// stand-in for ssh), a rank of the second killed; the restart runs on the
// first alone, 2 ranks, with the same global batch (train_batch_size: twice
// the accumulation), from the checkpoint 4 ranks wrote. Its losses follow a
// 2-rank run's (another layout: equal to float rounding, not bit for bit).
TEST_F(TrainCli, RestartWithoutTheFailedHostKeepsTheGlobalBatch) {
  const std::string hostfile = write_file(dir_, "hostfile", "localhost slots=2\n127.0.0.2 slots=2\n");
  const std::string config = write_file(
      dir_, "ds_config.json",
      R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": )"
      R"({"lr": 1e-3}}, "zero_optimization": {"stage": 1}, "csv_monitor": {"enabled": true, "output_path": "runs", )"
      R"("job_name": "restart"}})");
  const std::string straight_dir = dir_ + "/straight";
  stratum::fs::make_directories(straight_dir);
  const Result straight = run(train_cmd(straight_dir, 16, "--save-every 2 --sample-tokens 0", config));
  ASSERT_EQ(straight.status, 0) << straight.output;
  const auto want = losses(straight_dir + "/log/metrics.csv");

  const std::string job_dir = dir_ + "/job";
  stratum::fs::make_directories(job_dir);
  std::string cmd = train_cmd(job_dir, 16, "--save-every 2 --sample-tokens 0", config);
  const std::string head = kBin + "/stratum-run --num_procs 2 ";
  // Two "hosts" on one machine: Open MPI's shared-memory transport is for one host; TCP between them.
  cmd = "env OMPI_MCA_btl=self,tcp " + kBin + "/stratum-run --hostfile " + hostfile + " --launcher_agent " +
        STRATUM_SOURCE_DIR + "/tests/distributed/launch/fake_ssh.sh --max_restarts 1 --exclude_failed_hosts " +
        cmd.substr(head.size());
  auto job = std::async(std::launch::async, [&] { return run(cmd); });
  if (!wait_for(job, [&] { return latest_step(job_dir) >= 2 && rank_pid(job_dir, 3) != 0; })) {
    const Result r = job.get();
    if (r.output.find("All nodes which are allocated for this job are already filled") != std::string::npos)
      GTEST_SKIP() << "this Open MPI treats 127.0.0.2 as the local node: two loopback hosts are one here";
    FAIL() << "the run ended before its first checkpoint:\n" << r.output;
  }
  ASSERT_EQ(::kill(rank_pid(job_dir, 3), SIGKILL), 0);
  const Result r = job.get();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "stratum-run: attempt 1 of 2 failed: rank 3 (host 127.0.0.2, local rank 1) killed by signal 9"))
      << r.output;
  EXPECT_TRUE(has(r, "stratum-run: --exclude_failed_hosts: attempt 2 runs without host 127.0.0.2")) << r.output;
  EXPECT_TRUE(has(r, "batch 32 = 8 x 2 x 2 data-parallel")) << r.output;
  EXPECT_TRUE(has(r, "(saved by 4 data-parallel ranks")) << r.output;
  EXPECT_TRUE(has(r, "resumed at step ")) << r.output;
  const auto got = losses(job_dir + "/log/metrics.csv");
  ASSERT_EQ(got.size(), 16u);
  for (int s = 1; s <= 16; ++s) EXPECT_NEAR(got.at(s), want.at(s), 1e-4 * std::abs(want.at(s))) << "step " << s;
}
