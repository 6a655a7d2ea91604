// The mpirun command line, exports, the rank shim's arguments and environment,
// and the process helpers that need no launch (line prefixes, wait statuses).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "../../common/error_of.h"
#include "stratum/core/error.h"
#include "stratum/distributed/launch/mpirun_command.h"
#include "stratum/distributed/launch/process.h"
#include "stratum/distributed/launch/rank_shim.h"

namespace stratum::distributed::launch {
namespace {

using test::error_of;

size_t count(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::count(v.begin(), v.end(), s));
}

// Index of the first `a` followed by `b`, or npos.
size_t find_pair(const std::vector<std::string>& v, const std::string& a, const std::string& b, size_t from = 0) {
  for (size_t i = from; i + 1 < v.size(); ++i)
    if (v[i] == a && v[i + 1] == b) return i;
  return std::string::npos;
}

LaunchPlan two_host_plan() {
  LaunchPlan plan;
  plan.hosts = {{"node-a", {0, 1}, {"0", "1"}}, {"node-b", {1}, {"1"}}};
  plan.gpu = true;
  plan.master_addr = "node-a";
  plan.master_port = 29555;
  plan.exports = {{"NCCL_DEBUG", "INFO"}};
  plan.mpirun = "/usr/bin/mpirun";
  plan.shim = "/opt/stratum/bin/stratum-run";
  plan.program = {"python", "train.py", "--deepspeed_config", "ds config.json"};
  return plan;
}

TEST(MpirunCommand, OneAppContextPerHost) {
  const auto argv = build_mpirun_argv(two_host_plan());
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv[0], "/usr/bin/mpirun");
  EXPECT_EQ(count(argv, ":"), 1u);  // two contexts
  const size_t colon = static_cast<size_t>(std::find(argv.begin(), argv.end(), ":") - argv.begin());
  EXPECT_LT(find_pair(argv, "-np", "2"), colon);
  EXPECT_LT(find_pair(argv, "--host", "node-a:2"), colon);
  EXPECT_GT(find_pair(argv, "-np", "1"), colon);
  EXPECT_NE(find_pair(argv, "--host", "node-b:1"), std::string::npos);
  EXPECT_NE(find_pair(argv, "--bind-to", "none"), std::string::npos);
  EXPECT_EQ(count(argv, "--oversubscribe"), 0u);  // GPU slots are never oversubscribed
  // Shim per context, with the host's devices and the program untouched after "--".
  EXPECT_EQ(count(argv, "/opt/stratum/bin/stratum-run"), 2u);
  EXPECT_NE(find_pair(argv, "--devices", "0,1"), std::string::npos);
  EXPECT_NE(find_pair(argv, "--devices", "1"), std::string::npos);
  EXPECT_NE(find_pair(argv, "--node", "node-b"), std::string::npos);
  EXPECT_NE(find_pair(argv, "--node_rank", "1"), std::string::npos);
  EXPECT_EQ(argv.back(), "ds config.json");  // one argv element, spaces and all
  EXPECT_EQ(count(argv, "ds config.json"), 2u);
}

TEST(MpirunCommand, ExportsInEveryContext) {
  const auto argv = build_mpirun_argv(two_host_plan());
  for (const char* kv : {"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1",
                         "MASTER_ADDR=node-a", "MASTER_PORT=29555", "NCCL_DEBUG=INFO"}) {
    EXPECT_EQ(count(argv, kv), 2u) << kv;
    const size_t first = find_pair(argv, "-x", kv);
    ASSERT_NE(first, std::string::npos) << kv;
    EXPECT_NE(find_pair(argv, "-x", kv, first + 1), std::string::npos) << kv;
  }
}

TEST(MpirunCommand, NoShellAnywhere) {
  const auto argv = build_mpirun_argv(two_host_plan());
  for (const auto& a : argv) {
    EXPECT_NE(a, "sh") << "a shell in the command";
    EXPECT_NE(a, "bash");
    EXPECT_NE(a, "-c");
  }
  // The program is its own argv words, not one command string.
  EXPECT_NE(find_pair(argv, "python", "train.py"), std::string::npos);
}

TEST(MpirunCommand, CpuRunsOversubscribeAndHaveNoDevices) {
  LaunchPlan plan = two_host_plan();
  plan.gpu = false;
  const auto argv = build_mpirun_argv(plan);
  EXPECT_EQ(count(argv, "--oversubscribe"), 1u);
  EXPECT_EQ(count(argv, "--devices"), 0u);
}

TEST(MpirunCommand, AgentLogDirPrefixAndExtraArgs) {
  LaunchPlan plan = two_host_plan();
  plan.launcher_agent = "/work/tests/fake_ssh.sh";
  plan.log_dir = "/tmp/logs";
  plan.prefix_output = false;
  plan.launcher_args = {"--mca", "btl", "self,tcp"};
  plan.grace_period_s = 3;
  const auto argv = build_mpirun_argv(plan);
  const size_t agent = find_pair(argv, "plm_rsh_agent", "/work/tests/fake_ssh.sh");
  ASSERT_NE(agent, std::string::npos);
  EXPECT_EQ(argv[agent - 1], "--mca");
  EXPECT_NE(find_pair(argv, "btl", "self,tcp"), std::string::npos);
  EXPECT_NE(find_pair(argv, "odls_base_sigkill_timeout", "3"), std::string::npos);
  EXPECT_NE(find_pair(argv, "orte_abort_on_non_zero_status", "1"), std::string::npos);
  EXPECT_EQ(count(argv, "--log_dir"), 2u);
  EXPECT_EQ(count(argv, "--no_prefix"), 2u);
}

TEST(MpirunCommand, RejectsWhatMpirunCannotTake) {
  LaunchPlan plan = two_host_plan();
  plan.hosts[1].name = "::1";
  EXPECT_NE(error_of([&] { build_mpirun_argv(plan); }).find("does not take IPv6 literals"), std::string::npos);
  plan = two_host_plan();
  plan.hosts[1].name = "bad;host";
  EXPECT_NE(error_of([&] { build_mpirun_argv(plan); }).find("not a valid host name"), std::string::npos);
  plan = two_host_plan();
  plan.launcher_agent = "/a b/ssh";
  EXPECT_NE(error_of([&] { build_mpirun_argv(plan); }).find("--launcher_agent"), std::string::npos);
  plan = two_host_plan();
  plan.program.clear();
  EXPECT_NE(error_of([&] { build_mpirun_argv(plan); }).find("no program given"), std::string::npos);
}

// Open MPI cut node-b.example.com to node-b and 999.999.999.999 to 999.
TEST(MpirunCommand, HostNamesAreKeptAsWritten) {
  LaunchPlan plan = two_host_plan();
  plan.hosts[1].name = "node-b.example.com";
  const auto argv = build_mpirun_argv(plan);
  const size_t keep = find_pair(argv, "orte_keep_fqdn_hostnames", "1");
  ASSERT_NE(keep, std::string::npos);
  EXPECT_EQ(argv[keep - 1], "--mca");
  EXPECT_LT(keep, find_pair(argv, "-np", "2"));  // a global option, before the first app context
  EXPECT_NE(find_pair(argv, "--host", "node-b.example.com:1"), std::string::npos);
  EXPECT_NE(find_pair(argv, "--node", "node-b.example.com"), std::string::npos);
  plan.hosts[1].name = "999.999.999.999";
  EXPECT_NE(error_of([&] { build_mpirun_argv(plan); }).find("'999.999.999.999' is not a valid IPv4 address"),
            std::string::npos);
  plan.hosts[1].name = std::string(45, 'b') + ".example.com";
  EXPECT_NE(error_of([&] { build_mpirun_argv(plan); }).find("has 57 characters; Open MPI 4.1's mpirun aborts"),
            std::string::npos);
}

TEST(MpirunCommand, ColonArgumentsSurviveMpirun) {
  LaunchPlan plan = two_host_plan();
  plan.hosts.resize(1);
  plan.program = {"/bin/echo", "a", ":", "b", ":"};
  const auto argv = build_mpirun_argv(plan);
  EXPECT_EQ(count(argv, ":"), 0u);  // mpirun would split the job there
  // What mpirun hands the shim parses back to the original program.
  const auto shim = std::find(argv.begin(), argv.end(), std::string(kRankShimFlag));
  ASSERT_NE(shim, argv.end());
  const auto parsed = parse_shim_arguments(std::vector<std::string>(shim + 1, argv.end()));
  EXPECT_EQ(parsed.program, plan.program);
}

TEST(Exports, ParseSpecs) {
  std::map<std::string, std::string> env = {{"HOME_DIR", "/home/u"}};
  auto getenv = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const auto out = parse_exports({"FOO=bar", "HOME_DIR", "EMPTY=", "X=a=b", "FOO=baz", "NCCL_NVLS_ENABLE=0"}, getenv);
  const std::vector<EnvVar> expected = {
      {"FOO", "baz"}, {"HOME_DIR", "/home/u"}, {"EMPTY", ""}, {"X", "a=b"}, {"NCCL_NVLS_ENABLE", "0"}};
  EXPECT_EQ(out, expected);
  EXPECT_NE(error_of([&] { parse_exports({"UNSET_ONE"}, getenv); }).find("UNSET_ONE is not set here"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_exports({"1BAD=x"}, getenv); }).find("'1BAD' is not a variable name"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_exports({"A-B=x"}, getenv); }).find("is not a variable name"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_exports({"NCCL_NVLS_ENABLE=1"}, getenv); }).find("always sets NCCL_NVLS_ENABLE=0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_exports({"MASTER_PORT=1"}, getenv); }).find("use --master_port"),
            std::string::npos);
}

TEST(Exports, PassThroughLikeDeepSpeed) {
  const auto out = passthrough_exports({"HOME=/root", "NCCL_DEBUG=INFO", "PYTHONPATH=/src", "UCX_TLS=tcp",
                                        "STRATUM_LOG_LEVEL=debug", "NCCL_NVLS_ENABLE=1", "PATH=/bin", "odd"});
  const std::vector<EnvVar> expected = {
      {"NCCL_DEBUG", "INFO"}, {"PYTHONPATH", "/src"}, {"UCX_TLS", "tcp"}, {"STRATUM_LOG_LEVEL", "debug"}};
  EXPECT_EQ(out, expected);
}

TEST(Exports, FixedVariablesWin) {
  LaunchPlan plan = two_host_plan();
  plan.exports = {{"NCCL_NVLS_ENABLE", "1"}};  // cannot come from parse_exports, but must lose anyway
  const auto argv = build_mpirun_argv(plan);
  EXPECT_EQ(count(argv, "NCCL_NVLS_ENABLE=1"), 0u);
  EXPECT_EQ(count(argv, "NCCL_NVLS_ENABLE=0"), 2u);
}

TEST(MpirunCommand, MasterAddrDefaultAndRootEnvironment) {
  EXPECT_EQ(default_master_addr({{"localhost", {0}, {"0"}}}, "box"), "127.0.0.1");
  EXPECT_EQ(default_master_addr({{"localhost", {0}, {"0"}}, {"n2", {0}, {"0"}}}, "box"), "box");
  EXPECT_EQ(default_master_addr({{"n1", {0}, {"0"}}, {"n2", {0}, {"0"}}}, "box"), "n1");
  EXPECT_TRUE(mpirun_environment(false).empty());
  const std::vector<EnvVar> root = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  EXPECT_EQ(mpirun_environment(true), root);
  EXPECT_EQ(format_command({"mpirun", "-x", "A=b c", "it's"}), "mpirun -x 'A=b c' 'it'\\''s'");
}

// ---- the rank shim ----

std::map<std::string, std::string> ompi_env(int rank, int size, int local, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)},
          {"MASTER_ADDR", "node-a"},
          {"MASTER_PORT", "29500"}};
}

GetEnv lookup(const std::map<std::string, std::string>& env) {
  return [&env](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

TEST(RankShim, ArgumentsRoundTrip) {
  ShimArgs args;
  args.node = "node-b";
  args.node_rank = 1;
  args.devices = std::vector<std::string>{"1", "3"};
  args.log_dir = "/tmp/l";
  args.prefix = false;
  args.program = {"prog", "--flag", "--", "x"};
  const auto words = shim_arguments(args);
  EXPECT_EQ(words.front(), kRankShimFlag);
  const auto back = parse_shim_arguments(std::vector<std::string>(words.begin() + 1, words.end()));
  EXPECT_EQ(back.node, "node-b");
  EXPECT_EQ(back.node_rank, 1);
  ASSERT_TRUE(back.devices.has_value());
  EXPECT_EQ(*back.devices, (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(back.log_dir, "/tmp/l");
  EXPECT_FALSE(back.prefix);
  EXPECT_EQ(back.program, args.program);
}

TEST(RankShim, BadArguments) {
  EXPECT_NE(error_of([] { parse_shim_arguments({"--", "prog"}); }).find("--node is required"), std::string::npos);
  EXPECT_NE(error_of([] { parse_shim_arguments({"--node", "a", "--"}); }).find("no program"), std::string::npos);
  EXPECT_NE(error_of([] { parse_shim_arguments({"--node", "a", "--what", "--", "p"}); }).find("unexpected argument"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_shim_arguments({"--node"}); }).find("needs a value"), std::string::npos);
}

TEST(RankShim, EnvironmentFromOpenMpi) {
  const auto env = ompi_env(3, 4, 1, 2);
  const auto rank = rank_info_from_env(lookup(env));
  EXPECT_EQ(rank.rank, 3);
  EXPECT_EQ(rank.world_size, 4);
  EXPECT_EQ(rank.local_rank, 1);
  EXPECT_EQ(rank.local_world_size, 2);
  ShimArgs args;
  args.node = "node-b";
  args.node_rank = 1;
  args.devices = std::vector<std::string>{"2", "3"};
  args.program = {"p"};
  const auto vars = rank_environment(rank, args, lookup(env));
  const std::vector<EnvVar> expected = {{"RANK", "3"},
                                        {"LOCAL_RANK", "1"},
                                        {"WORLD_SIZE", "4"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"NODE_RANK", "1"},
                                        {"STRATUM_OUTPUT_PREFIXED", "1"},
                                        {"CUDA_VISIBLE_DEVICES", "2,3"}};
  EXPECT_EQ(vars, expected);
  args.devices.reset();  // CPU ranks: CUDA_VISIBLE_DEVICES left alone
  args.prefix = false;   // nor is STRATUM_OUTPUT_PREFIXED set
  EXPECT_EQ(rank_environment(rank, args, lookup(env)).size(), 5u);
}

TEST(RankShim, EnvironmentErrors) {
  std::map<std::string, std::string> none;
  EXPECT_NE(error_of([&] { rank_info_from_env(lookup(none)); }).find("OMPI_COMM_WORLD_RANK is not set"),
            std::string::npos);
  auto env = ompi_env(0, 2, 0, 2);
  env.erase("MASTER_PORT");
  ShimArgs args;
  args.node = "n";
  args.program = {"p"};
  const auto rank = rank_info_from_env(lookup(env));
  EXPECT_NE(error_of([&] { rank_environment(rank, args, lookup(env)); }).find("MASTER_PORT is not set"),
            std::string::npos);
  env = ompi_env(1, 2, 1, 2);
  args.devices = std::vector<std::string>{"0"};
  EXPECT_NE(error_of([&] { rank_environment(rank_info_from_env(lookup(env)), args, lookup(env)); })
                .find("only 1 devices were chosen"),
            std::string::npos);
  env["OMPI_COMM_WORLD_RANK"] = "x";
  EXPECT_NE(error_of([&] { rank_info_from_env(lookup(env)); }).find("is not a whole number"), std::string::npos);
}

TEST(RankShim, FailureLineNamesRankHostAndStatus) {
  RankInfo rank{1, 4, 1, 2};
  ShimArgs args;
  args.node = "node2";
  EXPECT_EQ(rank_failure_line(rank, args, W_EXITCODE(3, 0)),
            "stratum-run: rank 1 (host node2, local rank 1) exited with status 3");
  EXPECT_EQ(rank_failure_line(rank, args, 9), "stratum-run: rank 1 (host node2, local rank 1) killed by signal 9 (SIGKILL)");
  EXPECT_EQ(rank_prefix(rank), "[rank 1] ");
}

// ---- process helpers without processes ----

TEST(WaitStatus, WordsAndExitCodes) {
  EXPECT_EQ(describe_wait_status(W_EXITCODE(0, 0)), "exited with status 0");
  EXPECT_EQ(describe_wait_status(15), "killed by signal 15 (SIGTERM)");
  EXPECT_EQ(describe_wait_status(11 | 0x80), "killed by signal 11 (SIGSEGV), core dumped");
  EXPECT_EQ(exit_code_of(W_EXITCODE(3, 0)), 3);
  EXPECT_EQ(exit_code_of(9), 137);
  EXPECT_EQ(signal_name(2), "SIGINT");
}

TEST(LinePrefixer, WholeLinesOnly) {
  LinePrefixer p("[rank 0] ");
  EXPECT_EQ(p.feed("hello\nwor"), "[rank 0] hello\n");
  EXPECT_TRUE(p.has_partial());
  EXPECT_EQ(p.feed("ld\n\nx"), "[rank 0] world\n[rank 0] \n");
  EXPECT_EQ(p.finish(), "[rank 0] x\n");  // an open last line is closed
  EXPECT_EQ(p.finish(), "");
}

TEST(LinePrefixer, PartialFlushContinuesWithoutSecondPrefix) {
  LinePrefixer p("[r] ");
  EXPECT_EQ(p.feed("step 1"), "");
  EXPECT_EQ(p.take_partial(), "[r] step 1");
  EXPECT_EQ(p.feed(" done\nnext\n"), " done\n[r] next\n");
}

TEST(LinePrefixer, CarriageReturnsRedrawUnderThePrefix) {
  LinePrefixer p("[r] ");
  EXPECT_EQ(p.feed("10%\r20%\r"), "[r] 10%\r[r] 20%\r");
  EXPECT_EQ(p.feed("100%\r\nok\r\n"), "[r] 100%\r\n[r] ok\r\n");  // "\r\n" is one line end
}

TEST(Process, SpawnAndCapture) {
  const auto out = capture_output({"echo", "a b", "c"}, 10);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, "a b c\n");
  EXPECT_FALSE(capture_output({"false"}, 10).has_value());
  EXPECT_FALSE(capture_output({"/nonexistent/program"}, 10).has_value());
  EXPECT_FALSE(capture_output({"sleep", "30"}, 1).has_value());  // timed out, killed
  SpawnOptions opts;
  opts.argv = {"/nonexistent/program", "x"};
  EXPECT_NE(error_of([&] { spawn(opts); }).find("cannot run '/nonexistent/program': No such file or directory"),
            std::string::npos);
  EXPECT_TRUE(find_program("sh").has_value());
  EXPECT_FALSE(find_program("/nonexistent/program").has_value());
  EXPECT_FALSE(find_program("no-such-program-stratum").has_value());
}

}  // namespace
}  // namespace stratum::distributed::launch
