// Goodput: a rank stopped (SIGSTOP) in the middle of training ends the job
// naming it, the operation the other rank waits in (op, group, number) and the
// stopped rank's last operations, from the flight recorder's files (once
// through the rank shim's heartbeat, once through the collective timeout);
// a rank slower than the others in every step is named as a straggler.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <future>
#include <regex>
#include <thread>

#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

bool has(const Result& r, const std::string& s) { return r.output.find(s) != std::string::npos; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Rank `rank`'s pid from its flight file once it has run `ops` operations on
// the data-parallel group (training is under way); 0 when the run ended first.
pid_t training_rank_pid(const std::string& flight_dir, int rank, int ops, const std::future<Result>& job) {
  const std::regex who("\nrank \\d+ world \\d+ pid (\\d+) ");
  const std::regex dp("group \\d+ issued (\\d+) completed \\d+ backend mpi ranks 0,1 name dp\\n");
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    const std::string text = slurp(flight_dir + "/rank" + std::to_string(rank) + ".txt");
    std::smatch pid, issued;
    if (std::regex_search(text, pid, who) && std::regex_search(text, issued, dp) && std::stoi(issued[1]) >= ops)
      return static_cast<pid_t>(std::stol(pid[1]));
    if (job.wait_for(std::chrono::milliseconds(50)) == std::future_status::ready) return 0;
  }
  return 0;
}

std::string hang_cmd(const std::string& dir, const std::string& launcher_flags) {
  const std::string cmd = train_cmd(dir, 100000, "--sample-tokens 0");
  const std::string head = kBin + "/stratum-run --num_procs 2 ";
  return head + launcher_flags + " --log_dir " + dir + "/runlog " + cmd.substr(head.size());
}

// The report's line for the operation rank 0 waits in: its op ([1]) and number
// ([2]). Rank 1 stopped inside that operation (its file shows it open) is
// reported as every rank being in it, each rank's wait named.
std::smatch waited_op(const Result& r, const std::string& line_start) {
  std::smatch m;
  const std::string ops = "(all_reduce|reduce_scatter|all_gather|broadcast)";
  const std::regex behind(line_start + ops + " #(\\d+) on mpi group 'dp' \\[ranks 0, 1\\]: rank 0 waits in it \\(for "
                          "[0-9.]+ m?s\\); not arrived: rank 1 \\(at #\\d+ when it last wrote its file\\)");
  const std::regex inside(line_start + "rank 0 waits in " + ops + " #(\\d+) on mpi group 'dp' \\[ranks 0, 1\\]");
  if (!std::regex_search(r.output, m, behind)) std::regex_search(r.output, m, inside);
  return m;
}

}  // namespace

TEST_F(TrainCli, StoppedRankIsNamedByTheHeartbeatWithItsLastOperations) {
  auto job = std::async(std::launch::async, [&] { return run(hang_cmd(dir_, "--heartbeat_timeout 3")); });
  const pid_t victim = training_rank_pid(dir_ + "/runlog/flight", 1, 20, job);
  ASSERT_NE(victim, 0) << "the run ended before training:\n" << job.get().output;
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const Result r = job.get();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  EXPECT_EQ(r.status, 124) << r.output;
  EXPECT_TRUE(has(r, "stratum-run: rank 1 (host localhost, local rank 1) made no progress for 3 s")) << r.output;
  EXPECT_TRUE(has(r, "stratum-run: hang of rank 1, flight recorder: files of 2 of 2 ranks in " + dir_ +
                         "/runlog/flight\n"))
      << r.output;
  EXPECT_FALSE(waited_op(r, "\n  ").empty()) << r.output;
  const std::string file = dir_ + "/runlog/flight/rank1.txt";
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\n  rank 1 \\(host [^,]+, pid " + std::to_string(victim) + "; " +
                                                     file + " written [0-9.]+ m?s ago, periodic\\): its last 5 "
                                                     "operations:\n(    [a-z_]+ #\\d+ on '[a-z]+'.*\n){5}")))
      << r.output;
  EXPECT_LT(seconds, 30.0) << r.output;
  const auto at = r.output.find("stratum-run: hang of rank 1");
  if (at != std::string::npos) std::printf("%s\n", r.output.substr(at, r.output.find("\n--", at) - at).c_str());
}

TEST_F(TrainCli, StoppedRankIsNamedByTheCollectiveTimeout) {
  auto job = std::async(std::launch::async,
                        [&] { return run("env STRATUM_COMM_TIMEOUT=8 " + hang_cmd(dir_, "--heartbeat_timeout 0")); });
  const pid_t victim = training_rank_pid(dir_ + "/runlog/flight", 1, 20, job);
  ASSERT_NE(victim, 0) << "the run ended before training:\n" << job.get().output;
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const Result r = job.get();
  ::kill(victim, SIGKILL);  // mpirun's abort should have ended it; never leave it stopped
  EXPECT_EQ(r.status, 124) << r.output;
  // Rank 0's timeout and its report name the same operation, by the backend's number.
  std::smatch timeout;
  ASSERT_TRUE(std::regex_search(r.output, timeout,
                                std::regex("\\[rank 0\\] error: ([a-z_]+) #(\\d+) \\([^)]*\\) on mpi group 'dp' "
                                           "\\[ranks 0, 1\\] timed out after 8.000 s")))
      << r.output;
  EXPECT_TRUE(has(r, "[rank 0] error: flight recorder: files of 2 of 2 ranks in " + dir_ + "/runlog/flight\n"))
      << r.output;
  const std::smatch report = waited_op(r, "\\[rank 0\\]   ");
  ASSERT_FALSE(report.empty()) << r.output;
  EXPECT_EQ(report[1].str(), timeout[1].str()) << r.output;
  EXPECT_EQ(report[2].str(), timeout[2].str()) << r.output;
  EXPECT_TRUE(has(r, "[rank 0]   rank 1 (host ")) << r.output;
  EXPECT_TRUE(has(r, "its last 5 operations:")) << r.output;
}

// Rank 1 sleeps 0.2 s in every step (STRATUM_STRAGGLER_FAULT): the log names it.
TEST_F(TrainCli, SlowRankIsNamedAsAStraggler) {
  const Result r = run("env STRATUM_STRAGGLER_FAULT=1:0.2 " + train_cmd(dir_, 16, "--sample-tokens 0"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("\\[rank 0\\] straggler: rank 1's own work in a step \\(its step time less its waits for "
                           "collectives\\) was more than 25% above the median of the other 1 rank of its stage for 5 "
                           "steps in a row \\(steps \\d+-\\d+\\); at step \\d+ [0-9.]+ s against [0-9.]+ s")))
      << r.output;
  EXPECT_FALSE(has(r, "straggler: rank 0")) << r.output;
  // The run's records flag it too: metrics.csv's straggler column (13th) names rank 1 from the step it was named.
  const std::map<int, double> flagged = metric(dir_ + "/log/metrics.csv", 12);
  ASSERT_FALSE(flagged.empty()) << slurp(dir_ + "/log/metrics.csv");
  for (const auto& [step, rank] : flagged) EXPECT_EQ(rank, 1.0) << "step " << step;
  EXPECT_EQ(flagged.rbegin()->first, 16) << "still flagged at the last step";
}
