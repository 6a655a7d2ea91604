// stratum-run end to end: real mpirun, real ranks (/bin/sh programs), each run
// under a hard time limit. Covers the rank environment, failure propagation,
// signal forwarding, output prefixes and log files, a two-"host" run over
// loopback (the second host reached through a fake ssh), and bad input.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stratum/distributed/launch/launcher.h"
#include "stratum/distributed/launch/process.h"

namespace stratum::distributed::launch {
namespace {

const std::string kLauncher = std::string(STRATUM_BIN_DIR) + "/stratum-run";
const std::string kFakeSsh = std::string(STRATUM_LAUNCH_TEST_DIR) + "/fake_ssh.sh";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string make_temp_dir() {
  std::string templ = ::testing::TempDir() + "stratum_launch_XXXXXX";
  if (!mkdtemp(templ.data())) return "/tmp";
  return templ;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Run {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;            // whole run
  double seconds_after_signal = -1;  // from the signal to the launcher's exit
  bool timed_out = false;
};

struct RunOptions {
  std::vector<std::pair<std::string, std::string>> env;
  int timeout_s = 60;
  // Sends `signal` to the launcher once stdout contains `signal_when` (every string of it).
  std::vector<std::string> signal_when;
  int signal = 0;
  // Words put before the launcher (e.g. `ip netns exec NS`).
  std::vector<std::string> wrapper;
};

// Runs stratum-run with args; stdout and stderr go to files; the run is killed
// (its process group) if it takes longer than timeout_s.
Run run_launcher(const std::vector<std::string>& args, const RunOptions& options = {}) {
  const std::string dir = make_temp_dir();
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  SpawnOptions spawn_options;
  spawn_options.argv = options.wrapper;
  spawn_options.argv.push_back(kLauncher);
  spawn_options.argv.insert(spawn_options.argv.end(), args.begin(), args.end());
  spawn_options.set_env = options.env;
  spawn_options.stdin_fd = null_fd;
  spawn_options.stdout_fd = out_fd;
  spawn_options.stderr_fd = err_fd;
  spawn_options.new_process_group = true;
  Run run;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point signalled;
  bool sent = false;
  const pid_t pid = spawn(spawn_options);
  ::close(out_fd);
  ::close(err_fd);
  ::close(null_fd);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (seconds_since(start) > options.timeout_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      run.timed_out = true;
      break;
    }
    if (options.signal && !sent) {
      const std::string out = read_file(out_path);
      bool ready = true;
      for (const auto& s : options.signal_when) ready = ready && out.find(s) != std::string::npos;
      if (ready) {
        kill(pid, options.signal);
        signalled = std::chrono::steady_clock::now();
        sent = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.seconds = seconds_since(start);
  if (sent) run.seconds_after_signal = seconds_since(signalled);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  return run;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

bool has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

#define EXPECT_HAS(text, piece) EXPECT_TRUE(has(text, piece)) << "missing: " << (piece) << "\n--- in:\n" << (text)

// CPU runs must not depend on the machine having GPUs.
const std::vector<std::pair<std::string, std::string>> kCpuEnv = {{"STRATUM_NUM_GPUS", "0"}};

TEST(Launcher, EveryRankGetsItsEnvironment) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher(
      {"--num_procs", "2", "--master_port", "29611", "--export", "FOO=bar baz", "/bin/sh", "-c",
       "echo \"VARS RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
       "NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT NVLS=$NCCL_NVLS_ENABLE "
       "SYMM=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM=$NVSHMEM_DISABLE_NVLS FOO=$FOO\""},
      o);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  for (int r = 0; r < 2; ++r) {
    EXPECT_HAS(run.out, "[rank " + std::to_string(r) + "] VARS RANK=" + std::to_string(r) +
                            " LOCAL_RANK=" + std::to_string(r) +
                            " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611"
                            " NVLS=0 SYMM=1 NVSHMEM=1 FOO=bar baz\n");
  }
  EXPECT_HAS(run.err, "stratum-run: 2 ranks on 1 host (processes)");
  EXPECT_FALSE(has(run.err, "job failed"));
}

TEST(Launcher, GpuSlotsFollowIncludeAndNumGpus) {
  RunOptions o;
  o.env = {{"STRATUM_NUM_GPUS", "4"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  const std::string show = "echo \"GPU RANK=$RANK LOCAL_RANK=$LOCAL_RANK CVD=$CUDA_VISIBLE_DEVICES\"";
  auto run = run_launcher({"--include", "localhost:1,3", "/bin/sh", "-c", show}, o);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, "[rank 0] GPU RANK=0 LOCAL_RANK=0 CVD=1,3\n");
  EXPECT_HAS(run.out, "[rank 1] GPU RANK=1 LOCAL_RANK=1 CVD=1,3\n");
  EXPECT_FALSE(has(run.out, "[rank 2]"));

  run = run_launcher({"--num_gpus", "3", "/bin/sh", "-c", show}, o);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, "[rank 2] GPU RANK=2 LOCAL_RANK=2 CVD=0,1,2\n");

  run = run_launcher({"--num_gpus", "5", "/bin/sh", "-c", show}, o);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_HAS(run.err, "stratum-run: error: --num_gpus 5: this machine has 4 GPUs");
}

TEST(Launcher, FailingRankStopsTheOthersAndIsNamed) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher(
      {"--num_procs", "2", "/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then sleep 0.3; exit 3; fi; exec sleep 60"}, o);
  ASSERT_FALSE(run.timed_out) << run.err;
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_LT(run.seconds, 20.0) << "rank 0 (sleep 60) was not stopped";
  EXPECT_HAS(run.err, "stratum-run: rank 1 (host localhost, local rank 1) exited with status 3\n");
  EXPECT_FALSE(has(run.err, "stratum-run: rank 0")) << "the stopped rank is not to blame:\n" << run.err;
  EXPECT_EQ(last_line(run.err),
            "stratum-run: job failed: rank 1 (host localhost, local rank 1) exited with status 3 "
            "(mpirun exited with status 3)");
}

TEST(Launcher, RankKilledBySignalIsNamed) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run =
      run_launcher({"--num_procs", "2", "/bin/sh", "-c", "if [ \"$RANK\" = 0 ]; then kill -KILL $$; fi; sleep 60"}, o);
  ASSERT_FALSE(run.timed_out) << run.err;
  EXPECT_NE(run.exit_code, 0);
  EXPECT_LT(run.seconds, 20.0);
  EXPECT_HAS(run.err, "stratum-run: rank 0 (host localhost, local rank 0) killed by signal 9 (SIGKILL)\n");
  EXPECT_HAS(last_line(run.err), "stratum-run: job failed: rank 0 (host localhost, local rank 0) killed by signal 9");
}

// Each rank traps the signal and leaves a marker file: proof it reached them.
// --max_restarts: what a restart runs.
TEST(RestartPolicy, ResumeIsAddedWhereThereIsASaveDir) {
  using V = std::vector<std::string>;
  RestartProgram r = restart_program({"stratum-train", "--config", "c.json", "--save-dir", "ckpt", "--save-every", "2"});
  EXPECT_TRUE(r.resumes);
  EXPECT_EQ(r.save_dir, "ckpt");
  EXPECT_EQ(r.program, (V{"stratum-train", "--config", "c.json", "--save-dir", "ckpt", "--save-every", "2", "--resume"}));
  // Already there: kept once.
  r = restart_program({"train", "--resume", "--save_dir=/x/y"});
  EXPECT_TRUE(r.resumes);
  EXPECT_EQ(r.save_dir, "/x/y");
  EXPECT_EQ(r.program, (V{"train", "--resume", "--save_dir=/x/y"}));
  // --resume-tag would go back to its tag on every restart: the latest instead.
  r = restart_program({"train", "--save-dir", "d", "--resume-tag", "global_step2", "--steps", "9"});
  EXPECT_EQ(r.program, (V{"train", "--save-dir", "d", "--steps", "9", "--resume"}));
  r = restart_program({"train", "--resume-tag=global_step2", "--save-dir=d"});
  EXPECT_EQ(r.program, (V{"train", "--save-dir=d", "--resume"}));
  // What follows a bare "--" is the program's data, not its flags.
  r = restart_program({"train", "--save-dir", "d", "--", "--resume-tag", "x"});
  EXPECT_EQ(r.program, (V{"train", "--save-dir", "d", "--resume", "--", "--resume-tag", "x"}));
  // No --save-dir (or one only after "--", or without a value): from scratch, unchanged.
  for (const V& p : {V{"train", "--steps", "3"}, V{"train", "--", "--save-dir", "d"}, V{"train", "--save-dir"},
                     V{"train", "--resume-tag", "t"}}) {
    r = restart_program(p);
    EXPECT_FALSE(r.resumes) << p.size();
    EXPECT_EQ(r.program, p);
  }
  EXPECT_FALSE(restart_program({}).resumes);
}

TEST(RestartPolicy, LinesNameTheAttemptTheRankAndWhatHappened) {
  const std::string failure =
      "rank 1 (host localhost, local rank 1) killed by signal 9 (SIGKILL) (mpirun exited with status 137)";
  EXPECT_EQ(restart_line({1, failure}, 2, restart_program({"t", "--save-dir", "ck"})),
            "attempt 1 of 3 failed: " + failure + "; restarting (attempt 2 of 3) from the latest checkpoint in ck");
  EXPECT_EQ(restart_line({2, "mpirun exited with status 1"}, 5, restart_program({"t"})),
            "attempt 2 of 6 failed: mpirun exited with status 1; restarting (attempt 3 of 6) from scratch (the "
            "program has no --save-dir)");
  EXPECT_EQ(restarts_spent_line({{1, "rank 0 (...) exited with status 3 (mpirun exited with status 3)"},
                                 {2, "rank 1 (...) made no progress for 3 s (mpirun exited with status 124)"}},
                                1),
            "job failed after 2 attempts (--max_restarts 1): attempt 1: rank 0 (...) exited with status 3 (mpirun "
            "exited with status 3); attempt 2: rank 1 (...) made no progress for 3 s (mpirun exited with status 124)");
}

// Every attempt fails: the job ends naming each, with the last one's status.
TEST(Launcher, SpentRestartsEndTheJobNamingEveryAttempt) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher({"--num_procs", "2", "--max_restarts", "2", "/bin/sh", "-c",
                                 "echo \"attempt $STRATUM_RESTART_COUNT\"; if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 60"},
                                o);
  ASSERT_FALSE(run.timed_out) << run.err;
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_LT(run.seconds, 40.0);
  for (const char* n : {"0", "1", "2"}) EXPECT_HAS(run.out, std::string("[rank 0] attempt ") + n + "\n");
  EXPECT_FALSE(has(run.out, "attempt 3")) << run.out;
  EXPECT_HAS(run.err, "stratum-run: --max_restarts 2: the program has no --save-dir, so a restart runs it from scratch");
  const std::string rank1 = "rank 1 (host localhost, local rank 1) exited with status 3 (mpirun exited with status 3)";
  EXPECT_HAS(run.err, "stratum-run: attempt 1 of 3 failed: " + rank1 + "; restarting (attempt 2 of 3) from scratch");
  EXPECT_HAS(run.err, "stratum-run: attempt 2 of 3 failed: " + rank1 + "; restarting (attempt 3 of 3) from scratch");
  EXPECT_EQ(last_line(run.err), "stratum-run: job failed after 3 attempts (--max_restarts 2): attempt 1: " + rank1 +
                                    "; attempt 2: " + rank1 + "; attempt 3: " + rank1);
}

// A killed rank on the first attempt only: the second attempt succeeds, and the
// program sees the attempt in STRATUM_RESTART_COUNT.
TEST(Launcher, RestartAfterAKilledRankSucceeds) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher(
      {"--num_procs", "2", "--max_restarts", "1", "/bin/sh", "-c",
       "if [ \"$STRATUM_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 0 ]; then kill -KILL $$; fi; "
       "if [ \"$STRATUM_RESTART_COUNT\" = 0 ]; then sleep 60; fi; echo \"done $STRATUM_RESTART_COUNT\""},
      o);
  ASSERT_FALSE(run.timed_out) << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_LT(run.seconds, 30.0);
  EXPECT_HAS(run.err, "stratum-run: attempt 1 of 2 failed: rank 0 (host localhost, local rank 0) killed by signal 9 "
                      "(SIGKILL) (mpirun exited with status 137); restarting (attempt 2 of 2) from scratch");
  EXPECT_HAS(run.out, "[rank 0] done 1\n");
  EXPECT_HAS(run.out, "[rank 1] done 1\n");
}

// Without --max_restarts nothing changes: no restart, no STRATUM_RESTART_COUNT.
TEST(Launcher, NoRestartsByDefault) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher({"--num_procs", "1", "/bin/sh", "-c", "echo \"count=${STRATUM_RESTART_COUNT-unset}\"; exit 4"}, o);
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_HAS(run.out, "count=unset");
  EXPECT_FALSE(has(run.err, "restarting")) << run.err;
  const auto bad = run_launcher({"--num_procs", "1", "--max_restarts", "-1", "/bin/true"}, o);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_HAS(bad.err, "stratum-run: error: --max_restarts must be 0..1000, got -1");
}

TEST(RestartPolicy, ExcludeFailedHostsNamesTheHostToLeaveOut) {
  EXPECT_EQ(failed_host("rank 3 (host 127.0.0.2, local rank 1) exited with status 5 (mpirun exited with status 5)"),
            "127.0.0.2");
  EXPECT_EQ(failed_host("rank 0 (host node-a.example.com, local rank 0) made no progress for 3 s"), "node-a.example.com");
  EXPECT_EQ(failed_host("mpirun exited with status 1"), std::nullopt);
  EXPECT_EQ(failed_host("rank 1 (host , local rank 0)"), std::nullopt);
  EXPECT_EQ(exclude_host("", "b"), "b");
  EXPECT_EQ(exclude_host("a:0,1", "b"), "a:0,1@b");
  EXPECT_EQ(exclude_host("a@b", "b"), "a@b");
  LaunchRequest f;
  f.hostfile = "hosts";
  EXPECT_EQ(exclude_failed_hosts_problem(f), "");
  f.num_procs = 2;
  EXPECT_NE(exclude_failed_hosts_problem(f).find("cannot be used with --num_nodes, --num_gpus or --num_procs"),
            std::string::npos);
  f.num_procs.reset();
  f.include = "a";
  EXPECT_NE(exclude_failed_hosts_problem(f).find("--include"), std::string::npos);
  f.include.clear();
  f.launcher = "slurm";
  EXPECT_NE(exclude_failed_hosts_problem(f).find("mpirun launches"), std::string::npos);
  EXPECT_NE(exclude_failed_hosts_problem(LaunchRequest{}).find("needs --hostfile"), std::string::npos);
}

TEST(Launcher, SigtermReachesEveryRank) {
  const std::string dir = make_temp_dir();
  RunOptions o;
  o.env = kCpuEnv;
  o.signal = SIGTERM;
  o.signal_when = {"[rank 0] ready", "[rank 1] ready"};
  const auto run = run_launcher(
      {"--num_procs", "2", "/bin/sh", "-c",
       "trap 'echo caught > " + dir + "/marker.$RANK; exit 0' TERM\necho ready\nsleep 60 & wait\n"},
      o);
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  ASSERT_GE(run.seconds_after_signal, 0) << "the ranks never got ready:\n" << run.out << run.err;
  EXPECT_LT(run.seconds_after_signal, 15.0);
  EXPECT_TRUE(exists(dir + "/marker.0")) << run.err;
  EXPECT_TRUE(exists(dir + "/marker.1")) << run.err;
  EXPECT_EQ(run.exit_code, 128 + SIGTERM);
  EXPECT_HAS(last_line(run.err), "stratum-run: job stopped by SIGTERM");
}

TEST(Launcher, SigintReachesEveryRank) {
  const std::string dir = make_temp_dir();
  RunOptions o;
  o.env = kCpuEnv;
  o.signal = SIGINT;
  o.signal_when = {"[rank 0] ready", "[rank 1] ready"};
  // Open MPI stops ranks with SIGTERM whatever stopped the job: trap both.
  const auto run = run_launcher(
      {"--num_procs", "2", "/bin/sh", "-c",
       "trap 'echo caught > " + dir + "/marker.$RANK; exit 0' INT TERM\necho ready\nsleep 60 & wait\n"},
      o);
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  ASSERT_GE(run.seconds_after_signal, 0) << run.out << run.err;
  EXPECT_LT(run.seconds_after_signal, 15.0);
  EXPECT_TRUE(exists(dir + "/marker.0")) << run.err;
  EXPECT_TRUE(exists(dir + "/marker.1")) << run.err;
  EXPECT_EQ(run.exit_code, 128 + SIGINT);
  EXPECT_HAS(last_line(run.err), "stratum-run: job stopped by SIGINT");
}

TEST(Launcher, KillingTheLauncherOutrightStillStopsTheRanks) {
  const std::string dir = make_temp_dir();
  RunOptions o;
  o.env = kCpuEnv;
  o.signal = SIGKILL;  // nothing to forward: mpirun gets SIGTERM as its parent dies
  o.signal_when = {"[rank 0] ready", "[rank 1] ready"};
  const auto run = run_launcher(
      {"--num_procs", "2", "/bin/sh", "-c",
       "trap 'echo caught > " + dir + "/marker.$RANK; exit 0' TERM\necho ready\nsleep 60 & wait\n"},
      o);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 128 + SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  while (!(exists(dir + "/marker.0") && exists(dir + "/marker.1")) && seconds_since(start) < 15)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(exists(dir + "/marker.0"));
  EXPECT_TRUE(exists(dir + "/marker.1"));
}

TEST(Launcher, OutputLinesCarryRankPrefixesAndLogFiles) {
  const std::string dir = make_temp_dir() + "/logs";
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher({"--num_procs", "2", "--log_dir", dir, "/bin/sh", "-c",
                                 "echo out line; echo err line >&2; printf 'a\\r'; printf 'tail'"},
                                o);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  for (const std::string r : {"0", "1"}) {
    EXPECT_HAS(run.out, "[rank " + r + "] out line\n");
    // A '\r' ends a piece (progress bars redraw under their prefix); another rank's
    // pieces may come in between, so the two are checked apart.
    EXPECT_HAS(run.out, "[rank " + r + "] a\r");
    EXPECT_HAS(run.out, "[rank " + r + "] tail\n");
    EXPECT_HAS(run.err, "[rank " + r + "] err line\n");
    const std::string log = read_file(dir + "/rank_" + r + ".log");
    EXPECT_HAS(log, "out line\n");
    EXPECT_HAS(log, "err line\n");
    EXPECT_FALSE(has(log, "[rank")) << log;
  }
}

TEST(Launcher, NoPrefixLeavesOutputAlone) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher({"--num_procs", "2", "--no_prefix", "/bin/sh", "-c", "echo plain $RANK"}, o);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, "plain 0\n");
  EXPECT_HAS(run.out, "plain 1\n");
  EXPECT_FALSE(has(run.out, "[rank"));
}

TEST(Launcher, ArgumentsPassVerbatim) {
  RunOptions o;
  o.env = kCpuEnv;
  // ":" would split mpirun's job; "$(id)" and ";" would mean something to a shell.
  const auto run = run_launcher({"--num_procs", "1", "/bin/echo", "a", ":", "b c", "$(id);", "--num_procs"}, o);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, "[rank 0] a : b c $(id); --num_procs\n");
}

// Some Open MPI builds (4.1.6 on the GPU machine) resolve 127.0.0.2 to the
// local node and fold the two loopback "hosts" into one; there the two-host
// runs cannot happen on one machine, and the network-namespace tests (which
// need real namespaces) are what covers several hosts.
#define SKIP_IF_LOOPBACK_HOSTS_FOLD(run)                                                                   \
  if (has((run).err, "All nodes which are allocated for this job are already filled"))                    \
    GTEST_SKIP() << "this Open MPI treats 127.0.0.2 as the local node: two loopback hosts are one here"

std::string two_host_hostfile(const std::string& dir) {
  const std::string path = dir + "/hostfile";
  write_file(path, "# two hosts on one machine: mpirun sees different names\nlocalhost slots=2\n\n127.0.0.2 slots=2\n");
  return path;
}

TEST(Launcher, TwoHostsOverLoopback) {
  const std::string dir = make_temp_dir();
  RunOptions o;
  o.env = {{"STRATUM_FAKE_SSH_LOG", dir + "/ssh.log"}};
  const auto run = run_launcher(
      {"--hostfile", two_host_hostfile(dir), "--launcher_agent", kFakeSsh, "/bin/sh", "-c",
       "echo \"HOST RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
       "NODE_RANK=$NODE_RANK CVD=$CUDA_VISIBLE_DEVICES\""},
      o);
  ASSERT_FALSE(run.timed_out) << run.err;
  SKIP_IF_LOOPBACK_HOSTS_FOLD(run);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  for (int r = 0; r < 4; ++r) {
    EXPECT_HAS(run.out, "[rank " + std::to_string(r) + "] HOST RANK=" + std::to_string(r) +
                            " LOCAL_RANK=" + std::to_string(r % 2) + " WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=" +
                            std::to_string(r / 2) + " CVD=0,1\n");
  }
  // The second host was reached through the launch agent, the first was not.
  EXPECT_EQ(read_file(dir + "/ssh.log"), "127.0.0.2\n");
  EXPECT_HAS(run.err, "4 ranks on 2 hosts");
}

// Open MPI cut host names at the first '.': node-b.example.com was launched as
// node-b. The name needs no resolving here: the fake agent runs the daemon on
// this machine, and it records the name it was asked to reach.
TEST(Launcher, FullHostNamesReachTheLaunchAgent) {
  const std::string dir = make_temp_dir();
  RunOptions o;
  o.env = {{"STRATUM_FAKE_SSH_LOG", dir + "/ssh.log"}};
  write_file(dir + "/hostfile", "localhost slots=1\nnode-b.example.com slots=1\n");
  const auto run = run_launcher({"--hostfile", dir + "/hostfile", "--num_procs", "1", "--launcher_agent", kFakeSsh,
                                 "/bin/sh", "-c", "echo \"FQDN RANK=$RANK NODE_RANK=$NODE_RANK\""},
                                o);
  ASSERT_FALSE(run.timed_out) << run.err;
  SKIP_IF_LOOPBACK_HOSTS_FOLD(run);  // (some sandboxes resolve every name to this machine)
  EXPECT_EQ(read_file(dir + "/ssh.log"), "node-b.example.com\n") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, "[rank 0] FQDN RANK=0 NODE_RANK=0\n");
  EXPECT_HAS(run.out, "[rank 1] FQDN RANK=1 NODE_RANK=1\n");
  EXPECT_HAS(run.err, "2 ranks on 2 hosts (processes): localhost [0], node-b.example.com [0]");

  // The longest name accepted runs (one more character and mpirun aborts: "stack smashing detected").
  const std::string longest = std::string(44, 'n') + ".example.com";
  write_file(dir + "/hostfile", "localhost slots=1\n" + longest + " slots=1\n");
  const auto longest_run = run_launcher({"--hostfile", dir + "/hostfile", "--num_procs", "1", "--launcher_agent",
                                         kFakeSsh, "/bin/sh", "-c", "echo \"LONG RANK=$RANK\""},
                                        o);
  ASSERT_FALSE(longest_run.timed_out) << longest_run.err;
  SKIP_IF_LOOPBACK_HOSTS_FOLD(longest_run);
  EXPECT_EQ(longest_run.exit_code, 0) << longest_run.err;
  EXPECT_HAS(longest_run.out, "[rank 1] LONG RANK=1\n");
  EXPECT_EQ(read_file(dir + "/ssh.log"), "node-b.example.com\n" + longest + "\n");
}

TEST(Launcher, TwoHostsWithIncludeAndARemoteFailure) {
  const std::string dir = make_temp_dir();
  RunOptions o;
  o.env = {{"STRATUM_FAKE_SSH_LOG", dir + "/ssh.log"}};
  const std::string hostfile = two_host_hostfile(dir);
  auto run = run_launcher({"--hostfile", hostfile, "--include", "localhost:1@127.0.0.2", "--launcher_agent", kFakeSsh,
                           "/bin/sh", "-c",
                           "echo \"INC RANK=$RANK LOCAL_RANK=$LOCAL_RANK NODE_RANK=$NODE_RANK CVD=$CUDA_VISIBLE_DEVICES\""},
                          o);
  ASSERT_FALSE(run.timed_out) << run.err;
  SKIP_IF_LOOPBACK_HOSTS_FOLD(run);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, "[rank 0] INC RANK=0 LOCAL_RANK=0 NODE_RANK=0 CVD=1\n");
  EXPECT_HAS(run.out, "[rank 1] INC RANK=1 LOCAL_RANK=0 NODE_RANK=1 CVD=0,1\n");
  EXPECT_HAS(run.out, "[rank 2] INC RANK=2 LOCAL_RANK=1 NODE_RANK=1 CVD=0,1\n");

  run = run_launcher({"--hostfile", hostfile, "--num_procs", "2", "--launcher_agent", kFakeSsh, "/bin/sh", "-c",
                      "if [ \"$RANK\" = 3 ]; then exit 5; fi; exec sleep 60"},
                     o);
  ASSERT_FALSE(run.timed_out) << run.err;
  EXPECT_EQ(run.exit_code, 5);
  EXPECT_LT(run.seconds, 20.0);
  EXPECT_HAS(last_line(run.err), "job failed: rank 3 (host 127.0.0.2, local rank 1) exited with status 5");
}

// The MPI backend (the distributed layer's collective tests) under stratum-run, on one
// host and on two loopback "hosts". Two hosts on one machine would share Open
// MPI's shared-memory segment names (same host name, same local ranks), so that
// run keeps to TCP over loopback; real hosts need nothing of the sort.
// --exclude_failed_hosts: a rank of the second host fails on the first
// attempt; the restart runs on the first host alone, at a world of 2.
TEST(Launcher, RestartLeavesOutTheFailedHost) {
  const std::string dir = make_temp_dir();
  RunOptions o;
  o.env = {{"STRATUM_FAKE_SSH_LOG", dir + "/ssh.log"}};
  const auto run = run_launcher(
      {"--hostfile", two_host_hostfile(dir), "--launcher_agent", kFakeSsh, "--max_restarts", "1",
       "--exclude_failed_hosts", "/bin/sh", "-c",
       "if [ \"$STRATUM_RESTART_COUNT\" = 0 ]; then if [ \"$RANK\" = 3 ]; then exit 5; fi; exec sleep 60; fi; "
       "echo \"again RANK=$RANK WORLD_SIZE=$WORLD_SIZE\""},
      o);
  ASSERT_FALSE(run.timed_out) << run.err;
  SKIP_IF_LOOPBACK_HOSTS_FOLD(run);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.err, "stratum-run: attempt 1 of 2 failed: rank 3 (host 127.0.0.2, local rank 1) exited with status 5");
  EXPECT_HAS(run.err, "stratum-run: --exclude_failed_hosts: attempt 2 runs without host 127.0.0.2 (--exclude 127.0.0.2)");
  EXPECT_HAS(run.err, "2 ranks on 1 host");
  EXPECT_HAS(run.out, "[rank 0] again RANK=0 WORLD_SIZE=2\n");
  EXPECT_HAS(run.out, "[rank 1] again RANK=1 WORLD_SIZE=2\n");
  EXPECT_FALSE(has(run.out, "RANK=2")) << run.out;

  const auto bad = run_launcher({"--num_procs", "2", "--max_restarts", "1", "--exclude_failed_hosts", "/bin/true"}, o);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_HAS(bad.err, "stratum-run: error: --exclude_failed_hosts needs --hostfile");
}

TEST(Launcher, MpiBackendRunsUnderTheLauncher) {
  const std::string program = std::string(STRATUM_BIN_DIR) + "/test_collectives";
  if (!exists(program)) GTEST_SKIP() << program << " is not built";
  RunOptions o;
  o.env = {{"STRATUM_NUM_GPUS", "0"}, {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
           {"STRATUM_COMM_TIMEOUT", "60"}};
  o.timeout_s = 100;
  auto run = run_launcher({"--num_procs", "2", program}, o);
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_HAS(run.out, "PASSED");

  const std::string dir = make_temp_dir();
  o.env.emplace_back("STRATUM_LOG_LEVEL", "debug");  // the grid ("world 4 = ...": both hosts, one world) is a debug line
  run = run_launcher({"--hostfile", two_host_hostfile(dir), "--num_procs", "2", "--launcher_agent", kFakeSsh,
                      "--launcher_args", "--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo",
                      program},
                     o);
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  SKIP_IF_LOOPBACK_HOSTS_FOLD(run);
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_HAS(run.out, "world 4 = ");
  EXPECT_HAS(run.out, "PASSED");
}

// Two hosts with network stacks of their own: network namespaces "a" and "b"
// on a bridge in a third, "hub", where stratum-run itself runs, so this test
// leaves the machine's own network alone. Hosts are reached through
// netns_ssh.sh. Needs root, `ip netns` and unshare; skipped otherwise.
class NetnsHosts : public ::testing::Test {
 protected:
  static bool ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"ip"};
    argv.insert(argv.end(), args.begin(), args.end());
    return capture_output(argv, 20).has_value();
  }

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (!find_program("ip") || !find_program("unshare")) GTEST_SKIP() << "needs ip and unshare";
    const std::string tag = "stratum-" + std::to_string(getpid());
    hub_ = tag + "-hub";
    if (!ip({"netns", "add", hub_})) GTEST_SKIP() << "cannot create network namespaces here";
    made_.push_back(hub_);
    ASSERT_TRUE(ip({"-n", hub_, "link", "set", "lo", "up"}));
    ASSERT_TRUE(ip({"-n", hub_, "link", "add", "br0", "type", "bridge"}));
    ASSERT_TRUE(ip({"-n", hub_, "addr", "add", "10.201.0.1/24", "dev", "br0"}));
    ASSERT_TRUE(ip({"-n", hub_, "link", "set", "br0", "up"}));
    for (int i = 0; i < 2; ++i) {
      const std::string ns = tag + (i == 0 ? "-a" : "-b");
      const std::string veth = "veth" + std::to_string(i);
      ASSERT_TRUE(ip({"netns", "add", ns}));
      made_.push_back(ns);
      namespaces_.push_back(ns);
      hosts_.push_back("10.201.0." + std::to_string(i + 2));
      ASSERT_TRUE(ip({"-n", hub_, "link", "add", veth, "type", "veth", "peer", "name", "e0", "netns", ns}));
      ASSERT_TRUE(ip({"-n", hub_, "link", "set", veth, "master", "br0"}));
      ASSERT_TRUE(ip({"-n", hub_, "link", "set", veth, "up"}));
      ASSERT_TRUE(ip({"-n", ns, "addr", "add", hosts_.back() + "/24", "dev", "e0"}));
      ASSERT_TRUE(ip({"-n", ns, "link", "set", "e0", "up"}));
      ASSERT_TRUE(ip({"-n", ns, "link", "set", "lo", "up"}));
    }
  }

  void TearDown() override {
    for (const auto& ns : made_) ip({"netns", "del", ns});  // links inside go with them
  }

  std::vector<std::string> launcher_args(const std::string& dir) const {
    const std::string hostfile = dir + "/hostfile";
    write_file(hostfile, "# two network namespaces\n" + hosts_[0] + " slots=2\n" + hosts_[1] + " slots=2\n");
    return {"--hostfile", hostfile, "--num_procs", "2", "--launcher_agent",
            std::string(STRATUM_LAUNCH_TEST_DIR) + "/netns_ssh.sh", "--launcher_args",
            "--mca oob_tcp_if_include 10.201.0.0/24 --mca btl_tcp_if_include 10.201.0.0/24"};
  }

  RunOptions options() const {
    RunOptions o;
    o.env = {{"STRATUM_NETNS_HOSTS", hosts_[0] + "=" + namespaces_[0] + " " + hosts_[1] + "=" + namespaces_[1]},
             {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
             {"STRATUM_COMM_TIMEOUT", "60"}};
    o.timeout_s = 100;
    o.wrapper = {"ip", "netns", "exec", hub_};
    return o;
  }

  std::string hub_;
  std::vector<std::string> made_, namespaces_, hosts_;
};

TEST_F(NetnsHosts, RanksSpreadOverTwoNetworkNamespaces) {
  auto args = launcher_args(make_temp_dir());
  args.insert(args.end(), {"/bin/sh", "-c",
                           "echo \"NS RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE="
                           "$LOCAL_WORLD_SIZE NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR HOST=$(hostname)\"; "
                           "ip -4 -o addr show dev e0"});
  const auto run = run_launcher(args, options());
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  for (int r = 0; r < 4; ++r) {
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    EXPECT_HAS(run.out, prefix + "NS RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r % 2) +
                            " WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 NODE_RANK=" + std::to_string(r / 2) +
                            " MASTER_ADDR=" + hosts_[0] + " HOST=" + namespaces_[static_cast<size_t>(r / 2)] + "\n");
    EXPECT_HAS(run.out, hosts_[static_cast<size_t>(r / 2)] + "/24");  // its own network stack
  }
}

TEST_F(NetnsHosts, MpiBackendAcrossNetworkNamespaces) {
  const std::string program = std::string(STRATUM_BIN_DIR) + "/test_collectives";
  if (!exists(program)) GTEST_SKIP() << program << " is not built";
  auto args = launcher_args(make_temp_dir());
  args.push_back(program);
  RunOptions o = options();
  o.env.emplace_back("STRATUM_LOG_LEVEL", "debug");  // the grid ("world 4 = ...") is a debug line
  const auto run = run_launcher(args, o);
  ASSERT_FALSE(run.timed_out) << run.out << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_HAS(run.out, "world 4 = ");
  EXPECT_HAS(run.out, "PASSED");
}

TEST(Launcher, BadInputIsRefusedBeforeAnythingRuns) {
  const std::string dir = make_temp_dir();
  const std::string marker = dir + "/mpirun-ran";
  const std::string fake_mpirun = dir + "/mpirun";
  write_file(fake_mpirun, "#!/bin/sh\ntouch " + marker + "\n");
  ::chmod(fake_mpirun.c_str(), 0755);
  write_file(dir + "/bad_host", "good slots=1\nfoo;rm slots=2\n");
  write_file(dir + "/no_slots", "# nodes\nnode1\n");
  write_file(dir + "/dup", "a slots=1\nb slots=1\na slots=1\n");
  write_file(dir + "/ok", "node1 slots=2\nnode2 slots=2\n");
  write_file(dir + "/huge_slots", "node1 slots=1000000000\n");
  write_file(dir + "/bad_ip", "999.999.999.999 slots=1\n");
  write_file(dir + "/long_name", std::string(45, 'n') + ".example.com slots=1\n");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);  // was read forever, waiting for a writer
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"--hostfile", dir + "/bad_host", "true"}, dir + "/bad_host:2: 'foo;rm' is not a valid host name"},
      {{"--hostfile", dir + "/no_slots", "true"}, dir + "/no_slots:2: missing slots"},
      {{"--hostfile", dir + "/dup", "true"}, "'a' is listed twice (lines 1 and 3)"},
      {{"--hostfile", dir + "/missing", "true"}, "cannot read hostfile"},
      {{"--hostfile", "/dev/zero", "true"}, "--hostfile /dev/zero: hostfile must be a regular file"},
      {{"--hostfile", dir + "/fifo", "true"}, "but this is a FIFO"},
      {{"--hostfile", dir + "/huge_slots", "true"}, "slots=1000000000 for host 'node1' is over the limit of 1024"},
      {{"--hostfile", dir + "/bad_ip", "true"}, dir + "/bad_ip:1: '999.999.999.999' is not a valid IPv4 address"},
      {{"--hostfile", dir + "/long_name", "true"}, "has 57 characters; Open MPI 4.1's mpirun aborts (stack smashing)"},
      {{"--num_procs", "100000", "true"}, "--num_procs 100000 is over the limit of 1024 per host"},
      {{"--hostfile", dir + "/ok", "--num_gpus", "5000", "true"}, "--num_gpus 5000 is over the limit of 1024 per host"},
      {{"--hostfile", dir + "/ok", "--num_nodes", "100000", "true"}, "--num_nodes 100000 is over the limit of 4096 hosts"},
      {{"--hostfile", dir + "/ok", "--include", "node3", "true"}, "--include: unknown host 'node3' (known hosts: node1, node2)"},
      {{"--hostfile", dir + "/ok", "--include", "node1:2", "true"}, "slot 2 of host 'node1' does not exist"},
      {{"--hostfile", dir + "/ok", "--num_gpus", "3", "true"}, "--num_gpus 3: host 'node1' has only 2 slots"},
      {{"--hostfile", dir + "/ok", "--num_nodes", "3", "true"}, "--num_nodes 3: only 2 hosts are available"},
      {{"--hostfile", dir + "/ok", "--include", "node1", "--exclude", "node2", "true"}, "cannot be used together"},
      {{"--num_procs", "2", "--include", "nohost", "true"}, "unknown host 'nohost' (known hosts: localhost)"},
      {{"--num_procs", "2", "--num_gpus", "1", "true"}, "--num_gpus and --num_procs cannot be used together"},
      {{"--num_gpus", "1", "true"}, "--num_gpus 1: no GPUs found on this machine"},
      {{"--num_procs", "0", "true"}, "--num_procs must be at least 1"},
      {{"--master_addr", "a;b", "true"}, "--master_addr: 'a;b' is not a valid host name"},
      {{"--master_port", "70000", "true"}, "--master_port must be in 1..65535"},
      {{"--export", "1X=2", "true"}, "'1X' is not a variable name"},
      {{"--bogus_flag", "true"}, "unknown flag '--bogus_flag'"},
      {{"--num_procs", "2"}, "no program given"},
      {{"--num_procs", "2", "no-such-program-stratum"}, "program 'no-such-program-stratum' not found in PATH"},
  };
  RunOptions o;
  o.env = {{"STRATUM_NUM_GPUS", "0"}, {"STRATUM_MPIRUN", fake_mpirun}};
  o.timeout_s = 20;
  for (const auto& c : cases) {
    const auto run = run_launcher(c.args, o);
    EXPECT_EQ(run.exit_code, 2) << c.expect << "\n" << run.err;
    EXPECT_HAS(run.err, "stratum-run: error: ");
    EXPECT_HAS(run.err, c.expect);
  }
  EXPECT_FALSE(exists(marker)) << "mpirun was started for bad input";
}

TEST(Launcher, DryRunPrintsTheMpirunCommand) {
  RunOptions o;
  o.env = kCpuEnv;
  const auto run = run_launcher({"--dry_run", "--num_procs", "2", "/bin/echo", "hi there"}, o);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, "--bind-to none");
  EXPECT_HAS(run.out, "-np 2 --host localhost:2");
  EXPECT_HAS(run.out, "-x NCCL_NVLS_ENABLE=0");
  EXPECT_HAS(run.out, "--rank-shim --node localhost --node_rank 0 --heartbeat_timeout 90 -- /bin/echo 'hi there'");
  if (geteuid() == 0) EXPECT_HAS(run.out, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ");
}

// --launcher slurm without SLURM: a stand-in srun that records being started.
TEST(Launcher, SlurmBadInputIsRefusedBeforeSrunRuns) {
  const std::string dir = make_temp_dir();
  const std::string marker = dir + "/srun-ran";
  const std::string fake_srun = dir + "/srun";
  write_file(fake_srun, "#!/bin/sh\ntouch " + marker + "\n");
  ::chmod(fake_srun.c_str(), 0755);
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"--launcher", "pdsh", "true"}, "--launcher 'pdsh': stratum-run supports mpirun (Open MPI, the default)"},
      {{"--launcher", "slurm", "--include", "n1:0,2@n2", "true"}, "--include 'n1:0,2': srun places tasks on whole"},
      {{"--launcher", "slurm", "--exclude", "n1@@n2", "true"}, "--exclude 'n1@@n2': an empty host"},
      {{"--launcher", "slurm", "--include", "n1", "--num_gpus", "2", "true"}, "--num_gpus cannot be combined with"},
      {{"--launcher", "slurm", "--export", "IFS_LIST=a,b", "true"}, "--export IFS_LIST=a,b: srun's --export list"},
      {{"--launcher", "slurm", "--grace_period", "5", "true"}, "--grace_period is Open MPI's"},
      {{"--launcher", "slurm", "--srun", dir + "/none", "true"}, "--srun '" + dir + "/none': not found"},
      {{"--comment", "x", "true"}, "--comment is passed to srun (--launcher slurm)"},
  };
  RunOptions o;
  o.env = {{"STRATUM_NUM_GPUS", "0"}, {"STRATUM_SRUN", fake_srun}};
  o.timeout_s = 20;
  for (const auto& c : cases) {
    const auto run = run_launcher(c.args, o);
    EXPECT_EQ(run.exit_code, 2) << c.expect << "\n" << run.err;
    EXPECT_HAS(run.err, "stratum-run: error: ");
    EXPECT_HAS(run.err, c.expect);
  }
  EXPECT_FALSE(exists(marker)) << "srun was started for bad input";
}

TEST(Launcher, SlurmDryRunPrintsTheSrunCommand) {
  const std::string dir = make_temp_dir();
  const std::string fake_srun = dir + "/srun";
  write_file(fake_srun, "#!/bin/sh\nexit 0\n");
  ::chmod(fake_srun.c_str(), 0755);
  RunOptions o;
  o.env = {{"STRATUM_NUM_GPUS", "0"}, {"STRATUM_SRUN", fake_srun}, {"SLURM_JOB_ID", "7"},
           {"SLURM_JOB_NODELIST", "gpu[07-09]"}};
  auto run = run_launcher({"--launcher", "slurm", "--dry_run", "--num_gpus", "4", "--num_nodes", "2", "--comment",
                           "nightly", "--launcher_args", "--partition debug", "/bin/echo", "hi there"},
                          o);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.out, fake_srun + " -n 8 --ntasks-per-node=4 -N 2 --gpus-per-node=4 --comment nightly "
                                  "--mpi=pmix --kill-on-bad-exit=1 --quit-on-interrupt --export=ALL,");
  EXPECT_HAS(run.out, ",NCCL_NVLS_ENABLE=0,");
  EXPECT_HAS(run.out, ",MASTER_ADDR=gpu07,MASTER_PORT=29500 --partition debug ");  // the allocation's first host
  EXPECT_HAS(run.out, "--rank-shim --slurm --heartbeat_timeout 90 -- /bin/echo 'hi there'");
  // Inside an allocation without counts, srun takes the allocation's; rank 0 lands on the first host not excluded.
  run = run_launcher({"--launcher", "slurm", "--dry_run", "--exclude", "gpu07", "/bin/echo"}, o);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(has(run.out, " -n ")) << run.out;
  EXPECT_HAS(run.out, " -x gpu07 ");
  EXPECT_HAS(run.out, ",MASTER_ADDR=gpu08,");
}

}  // namespace
}  // namespace stratum::distributed::launch
