// stratum-run --launcher slurm without SLURM: the srun command line, DeepSpeed's
// --include/--exclude as srun host lists, SLURM hostlists, MASTER_ADDR's
// default, the rank shim's --slurm mode read from srun's variables, and the
// launcher's flag checks and plan summaries shared with mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "../../common/error_of.h"
#include "stratum/core/error.h"
#include "stratum/distributed/launch/launch_plan.h"
#include "stratum/distributed/launch/launch_request.h"
#include "stratum/distributed/launch/rank_shim.h"
#include "stratum/distributed/launch/slurm_hostlist.h"
#include "stratum/distributed/launch/srun_command.h"

namespace stratum::distributed::launch {
namespace {

using test::error_of;

size_t count(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::count(v.begin(), v.end(), s));
}

size_t index_of(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

// Index of the first `a` followed by `b`, or npos.
size_t find_pair(const std::vector<std::string>& v, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < v.size(); ++i)
    if (v[i] == a && v[i + 1] == b) return i;
  return std::string::npos;
}

SrunPlan two_node_plan() {
  SrunPlan plan;
  plan.srun = "/usr/bin/srun";
  plan.tasks = 8;
  plan.tasks_per_node = 4;
  plan.nodes = 2;
  plan.gpus_per_node = 4;
  plan.nodelist = {"gpu[01-02]"};
  plan.comment = "run 7";
  plan.master_addr = "gpu01";
  plan.master_port = 29555;
  plan.exports = {{"NCCL_DEBUG", "INFO"}};
  plan.shim = "/opt/stratum/bin/stratum-run";
  plan.program = {"python", "train.py", "--deepspeed_config", "ds config.json"};
  return plan;
}

GetEnv lookup(const std::map<std::string, std::string>& env) {
  return [&env](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

TEST(SrunCommand, DeepSpeedsFlagsBecomeSrunOptions) {
  const auto argv = build_srun_argv(two_node_plan());
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv[0], "/usr/bin/srun");
  EXPECT_NE(find_pair(argv, "-n", "8"), std::string::npos);
  EXPECT_EQ(count(argv, "--ntasks-per-node=4"), 1u);
  EXPECT_NE(find_pair(argv, "-N", "2"), std::string::npos);
  EXPECT_NE(find_pair(argv, "-w", "gpu[01-02]"), std::string::npos);
  EXPECT_EQ(count(argv, "-x"), 0u);
  EXPECT_EQ(count(argv, "--gpus-per-node=4"), 1u);
  EXPECT_NE(find_pair(argv, "--comment", "run 7"), std::string::npos);
  EXPECT_EQ(count(argv, "--mpi=pmix"), 1u);
  EXPECT_EQ(count(argv, "--kill-on-bad-exit=1"), 1u);
  EXPECT_EQ(count(argv, "--quit-on-interrupt"), 1u);
  // One srun step, one shim command: no per-host contexts, no devices chosen here.
  EXPECT_EQ(count(argv, "/opt/stratum/bin/stratum-run"), 1u);
  const size_t shim = index_of(argv, "/opt/stratum/bin/stratum-run");
  EXPECT_EQ(argv[shim + 1], kRankShimFlag);
  EXPECT_EQ(argv[shim + 2], "--slurm");
  EXPECT_EQ(count(argv, "--devices"), 0u);
  EXPECT_EQ(count(argv, "--node"), 0u);
  EXPECT_EQ(argv.back(), "ds config.json");  // one argv element, spaces and all
  // srun's options all come before the shim.
  EXPECT_LT(index_of(argv, "--mpi=pmix"), shim);
}

TEST(SrunCommand, EnvironmentThroughExportAll) {
  const auto argv = build_srun_argv(two_node_plan());
  const auto it =
      std::find_if(argv.begin(), argv.end(), [](const std::string& a) { return a.rfind("--export=", 0) == 0; });
  ASSERT_NE(it, argv.end());
  EXPECT_EQ(*it,
            "--export=ALL,NCCL_DEBUG=INFO,NCCL_NVLS_ENABLE=0,TORCH_SYMM_MEM_DISABLE_MULTICAST=1,NVSHMEM_DISABLE_NVLS=1,"
            "MASTER_ADDR=gpu01,MASTER_PORT=29555");
  SrunPlan plan = two_node_plan();
  plan.exports = {{"NCCL_NVLS_ENABLE", "1"}};  // the fixed value wins, as under mpirun
  const auto again = build_srun_argv(plan);
  EXPECT_EQ(std::count_if(again.begin(), again.end(),
                          [](const std::string& a) { return a.find("NCCL_NVLS_ENABLE=1") != std::string::npos; }),
            0);
}

TEST(SrunCommand, CommaInAValueIsRefusedByName) {
  SrunPlan plan = two_node_plan();
  plan.exports = {{"NCCL_SOCKET_IFNAME", "eth0,eth1"}};
  const std::string e = error_of([&] { build_srun_argv(plan); });
  EXPECT_NE(e.find("--export NCCL_SOCKET_IFNAME=eth0,eth1"), std::string::npos) << e;
  EXPECT_NE(e.find("split at ','"), std::string::npos) << e;
}

TEST(SrunCommand, CountsLeftToTheAllocation) {
  SrunPlan plan = two_node_plan();
  plan.tasks.reset();
  plan.tasks_per_node.reset();
  plan.nodes.reset();
  plan.gpus_per_node.reset();
  plan.nodelist.clear();
  plan.exclude = {"bad1", "bad[2-3]"};
  plan.comment.clear();
  const auto argv = build_srun_argv(plan);
  for (const char* absent : {"-n", "-N", "-w", "--comment"}) EXPECT_EQ(count(argv, absent), 0u) << absent;
  EXPECT_NE(find_pair(argv, "-x", "bad1,bad[2-3]"), std::string::npos);
  for (const auto& a : argv) EXPECT_EQ(a.rfind("--gpus-per-node", 0), std::string::npos) << a;
}

TEST(SrunCommand, LauncherArgsComeLastAndMayChooseTheMpiPlugin) {
  SrunPlan plan = two_node_plan();
  plan.launcher_args = {"--partition", "debug", "--mpi=pmix_v4"};
  auto argv = build_srun_argv(plan);
  EXPECT_EQ(count(argv, "--mpi=pmix"), 0u);
  EXPECT_EQ(count(argv, "--mpi=pmix_v4"), 1u);
  EXPECT_LT(index_of(argv, "--kill-on-bad-exit=1"), index_of(argv, "--partition"));  // the user's options win
  EXPECT_LT(index_of(argv, "--partition"), index_of(argv, "/opt/stratum/bin/stratum-run"));
  plan.launcher_args = {"--mpi", "pmi2"};
  argv = build_srun_argv(plan);
  EXPECT_EQ(count(argv, "--mpi=pmix"), 0u);
}

TEST(SrunCommand, ShimFlagsAndColonsSurviveSrun) {
  SrunPlan plan = two_node_plan();
  plan.log_dir = "/tmp/logs";
  plan.prefix_output = false;
  plan.heartbeat_timeout_s = 30;
  plan.program = {"/bin/echo", "a", ":", "b"};
  const auto argv = build_srun_argv(plan);
  EXPECT_EQ(count(argv, ":"), 0u);  // srun would split the job there (heterogeneous components)
  const size_t shim = index_of(argv, std::string(kRankShimFlag));
  ASSERT_LT(shim, argv.size());
  const auto parsed =
      parse_shim_arguments(std::vector<std::string>(argv.begin() + static_cast<long>(shim) + 1, argv.end()));
  EXPECT_TRUE(parsed.slurm);
  EXPECT_EQ(parsed.log_dir, "/tmp/logs");
  EXPECT_FALSE(parsed.prefix);
  EXPECT_EQ(parsed.heartbeat_timeout_s, 30);
  EXPECT_EQ(parsed.program, plan.program);
}

TEST(SrunCommand, BadPlans) {
  SrunPlan plan = two_node_plan();
  plan.program.clear();
  EXPECT_NE(error_of([&] { build_srun_argv(plan); }).find("no program given"), std::string::npos);
  plan = two_node_plan();
  plan.shim = "stratum-run";
  EXPECT_NE(error_of([&] { build_srun_argv(plan); }).find("must be absolute"), std::string::npos);
}

TEST(SrunHostList, IncludeAndExcludeNameWholeHosts) {
  EXPECT_EQ(srun_host_list("", "--include"), std::vector<std::string>{});
  EXPECT_EQ(srun_host_list("node1@node2", "--include"), (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(srun_host_list("gpu[01-04]@cpu7", "--exclude"), (std::vector<std::string>{"gpu[01-04]", "cpu7"}));
  std::string e = error_of([] { srun_host_list("node1:0,2@node2", "--include"); });
  EXPECT_NE(e.find("--include 'node1:0,2': srun places tasks on whole nodes"), std::string::npos) << e;
  e = error_of([] { srun_host_list("node1@@node2", "--exclude"); });
  EXPECT_NE(e.find("--exclude 'node1@@node2': an empty host"), std::string::npos) << e;
  e = error_of([] { srun_host_list("good@foo;rm", "--include"); });
  EXPECT_NE(e.find("'foo;rm' is not a valid host name"), std::string::npos) << e;
  e = error_of([] { srun_host_list("gpu[01-", "--include"); });
  EXPECT_NE(e.find("--include: 'gpu[01-' has a '[' without its ']'"), std::string::npos) << e;
}

TEST(SlurmHostlist, ExpandsRangesKeepingZeroPadding) {
  EXPECT_EQ(expand_slurm_hostlist("node[01-03,07],gpu5", "x"),
            (std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(expand_slurm_hostlist("n[8-10]", "x"), (std::vector<std::string>{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_hostlist("n[098-100]", "x"), (std::vector<std::string>{"n098", "n099", "n100"}));
  EXPECT_EQ(expand_slurm_hostlist("r[1-2]-n[1-2].ib", "x"),
            (std::vector<std::string>{"r1-n1.ib", "r1-n2.ib", "r2-n1.ib", "r2-n2.ib"}));
  EXPECT_EQ(expand_slurm_hostlist("[1-2]a[3,5]", "x"), (std::vector<std::string>{"1a3", "1a5", "2a3", "2a5"}));
  EXPECT_EQ(expand_slurm_hostlist("solo", "x"), std::vector<std::string>{"solo"});
  EXPECT_EQ(first_slurm_host("node[01-03,07],gpu5", "x"), "node01");
  EXPECT_EQ(first_slurm_host("gpu5,node[01-03]", "x"), "gpu5");
  // Visiting stops when asked: the first host of a large list costs nothing more.
  size_t seen = 0;
  for_each_slurm_host("n[0-999999],m", "x", [&](const std::string&) { return ++seen < 2; });
  EXPECT_EQ(seen, 2u);
}

TEST(SlurmHostlist, MalformedListsNameTheirSource) {
  for (const char* bad : {"n[1-", "n]1", "n[3-1]", "n[a]", "n[[1]]", "a,,b", "n[]", "n[1-2-3]", ""}) {
    const std::string e = error_of([&] { expand_slurm_hostlist(bad, "SLURM_JOB_NODELIST"); });
    EXPECT_NE(e.find("SLURM_JOB_NODELIST: "), std::string::npos) << "'" << bad << "': " << e;
  }
}

TEST(SlurmHostlist, EveryNameIsCheckedHoweverFarIntoTheList) {
  // A hostile name after thousands of good ones reaches no srun argument.
  std::string e = error_of([] { srun_host_list("good[0-9999],bad;rm", "--include"); });
  EXPECT_NE(e.find("--include: 'bad;rm' is not a valid host name"), std::string::npos) << e;
  e = error_of([] { first_slurm_host("n[0-5000],m[1-", "SLURM_JOB_NODELIST"); });
  EXPECT_NE(e.find("SLURM_JOB_NODELIST: 'n[0-5000],m[1-' has a '[' without its ']'"), std::string::npos) << e;
  // Names that only go bad late in a range: 1000.0.0.1 is no IPv4 address.
  e = error_of([] { srun_host_list("[1-1000].0.0.1", "--exclude"); });
  EXPECT_NE(e.find("'256.0.0.1' is not a valid IPv4 address"), std::string::npos) << e;
  e = error_of([] { srun_master_addr({}, {"x[0-5000],y$"}, "n[1-2]", "login1"); });
  EXPECT_NE(e.find("--exclude: 'y$' is not a valid host name"), std::string::npos) << e;
}

TEST(SlurmHostlist, ListsLargerThanAnyClusterAreRefusedBeforeExpanding) {
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([] { expand_slurm_hostlist("n[0-999999999]", "--include"); });
  EXPECT_NE(e.find("names more than 1048576 hosts"), std::string::npos) << e;
  e = error_of([] { first_slurm_host("a[0-9999]b[0-9999]c[0-9999]", "SLURM_JOB_NODELIST"); });
  EXPECT_NE(e.find("SLURM_JOB_NODELIST: 'a[0-9999]b[0-9999]c[0-9999]' names more than"), std::string::npos) << e;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  // The largest list allowed is expanded and checked in well under a second.
  EXPECT_EQ(expand_slurm_hostlist("n[0-1023]m[0-1023]", "x").size(), size_t{1} << 20);
}

TEST(SrunMasterAddr, FirstHostOfTheStep) {
  EXPECT_EQ(srun_master_addr({"gpu[03-04]", "gpu01"}, {}, "gpu[01-08]", "login1"), "gpu03");
  EXPECT_EQ(srun_master_addr({}, {}, "gpu[01-08]", "login1"), "gpu01");
  EXPECT_EQ(srun_master_addr({}, {"gpu01", "gpu[02-03]"}, "gpu[01-08]", "login1"), "gpu04");  // -x left them out
  EXPECT_EQ(srun_master_addr({}, {}, nullptr, "login1"), "login1");  // a new allocation: not known yet
  EXPECT_EQ(srun_master_addr({}, {}, "", "login1"), "login1");
}

// ---- the rank shim as a task of srun ----

std::map<std::string, std::string> srun_env(int rank, int size, int local, int node, const std::string& per_node) {
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(size)},
          {"SLURM_LOCALID", std::to_string(local)},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_STEP_TASKS_PER_NODE", per_node},
          {"SLURMD_NODENAME", "gpu02"},
          {"MASTER_ADDR", "gpu01"},
          {"MASTER_PORT", "29500"}};
}

TEST(RankShimUnderSrun, ArgumentsRoundTrip) {
  ShimArgs args;
  args.slurm = true;
  args.log_dir = "/tmp/l";
  args.heartbeat_timeout_s = 5;
  args.program = {"prog", "--", "x"};
  const auto words = shim_arguments(args);
  EXPECT_EQ(words, (std::vector<std::string>{kRankShimFlag, "--slurm", "--log_dir", "/tmp/l", "--heartbeat_timeout",
                                             "5", "--", "prog", "--", "x"}));
  const auto back = parse_shim_arguments(std::vector<std::string>(words.begin() + 1, words.end()));
  EXPECT_TRUE(back.slurm);
  EXPECT_FALSE(back.devices.has_value());
  EXPECT_EQ(back.program, args.program);
}

TEST(RankShimUnderSrun, PlacementFlagsBelongToMpirun) {
  for (const auto& extra : {std::vector<std::string>{"--node", "a"}, std::vector<std::string>{"--node_rank", "1"},
                            std::vector<std::string>{"--devices", "0"}}) {
    std::vector<std::string> args = {"--slurm"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "p"});
    EXPECT_NE(error_of([&] { parse_shim_arguments(args); }).find("--slurm takes the node"), std::string::npos)
        << extra.front();
  }
  EXPECT_NE(error_of([] { parse_shim_arguments({"--", "p"}); }).find("--node is required (or --slurm"),
            std::string::npos);
}

TEST(RankShimUnderSrun, RankNodeAndNodeRankFromSlurm) {
  const auto env = srun_env(5, 7, 1, 2, "2(x3),1");
  ShimArgs args;
  args.slurm = true;
  args.program = {"p"};
  const RankInfo rank = shim_rank_info(args, lookup(env), "thishost");
  EXPECT_EQ(rank.rank, 5);
  EXPECT_EQ(rank.world_size, 7);
  EXPECT_EQ(rank.local_rank, 1);
  EXPECT_EQ(rank.local_world_size, 2);
  EXPECT_EQ(args.node, "gpu02");
  EXPECT_EQ(args.node_rank, 2);
  const std::vector<EnvVar> expected = {{"RANK", "5"},
                                        {"LOCAL_RANK", "1"},
                                        {"WORLD_SIZE", "7"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"NODE_RANK", "2"},
                                        {"STRATUM_OUTPUT_PREFIXED", "1"}};
  EXPECT_EQ(rank_environment(rank, args, lookup(env)), expected);  // CUDA_VISIBLE_DEVICES stays SLURM's
  EXPECT_EQ(rank_failure_line(rank, args, 3 << 8),
            "stratum-run: rank 5 (host gpu02, local rank 1) exited with status 3");

  auto no_name = env;
  no_name.erase("SLURMD_NODENAME");
  ShimArgs again;
  again.slurm = true;
  shim_rank_info(again, lookup(no_name), "thishost");
  EXPECT_EQ(again.node, "thishost");
}

TEST(RankShimUnderSrun, NotATaskOfSrun) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "12"}};  // a batch script
  ShimArgs args;
  args.slurm = true;
  const std::string e = error_of([&] { shim_rank_info(args, lookup(env), "h"); });
  EXPECT_NE(e.find("--slurm: SLURM_PROCID or SLURM_STEP_NUM_TASKS is not set"), std::string::npos) << e;
  env = srun_env(3, 2, 0, 0, "2");
  EXPECT_NE(error_of([&] { shim_rank_info(args, lookup(env), "h"); }).find("lie outside SLURM_STEP_NUM_TASKS=2"),
            std::string::npos);
  // Without --slurm the shim reads Open MPI's variables, even under srun.
  ShimArgs mpirun_args;
  mpirun_args.node = "n";
  EXPECT_NE(error_of([&] { shim_rank_info(mpirun_args, lookup(env), "h"); }).find("OMPI_COMM_WORLD_RANK is not set"),
            std::string::npos);
}

// The launcher's flags, checked before mpirun or srun starts (stratum-run's exit 2).
TEST(LaunchRequest, LauncherNameIsMpirunOrSlurmInAnyCase) {
  EXPECT_EQ(launcher_name("SLURM"), "slurm");
  EXPECT_EQ(launcher_name("mpirun"), "mpirun");
  EXPECT_FALSE(launcher_name("pdsh"));
}

TEST(LaunchRequest, RankSettingsNameTheBadFlag) {
  LaunchRequest r;
  EXPECT_NE(error_of([&] { rank_settings(r); }).find("no program given"), std::string::npos);
  r.program = {"true"};
  r.num_gpus = 2;
  r.num_procs = 2;
  EXPECT_NE(error_of([&] { rank_settings(r); }).find("--num_gpus and --num_procs cannot be used together"),
            std::string::npos);
  r.num_procs.reset();
  r.num_gpus = 0;
  EXPECT_NE(error_of([&] { rank_settings(r); }).find("--num_gpus must be at least 1, got 0"), std::string::npos);
  r.num_gpus.reset();
  r.master_port = 70000;
  EXPECT_NE(error_of([&] { rank_settings(r); }).find("--master_port must be in 1..65535"), std::string::npos);
  r.master_port = 29500;
  r.heartbeat_timeout = -1;
  EXPECT_NE(error_of([&] { rank_settings(r); }).find("--heartbeat_timeout must be 0 (off)"), std::string::npos);
  r.heartbeat_timeout = 30;
  r.launcher_args = " --a  b ";
  const RankSettings s = rank_settings(r);
  EXPECT_EQ(s.launcher_args, (std::vector<std::string>{"--a", "b"}));
  EXPECT_EQ(s.heartbeat_timeout_s, 30);
}

TEST(LaunchPlan, SummaryLines) {
  SrunPlan srun;
  srun.tasks = 8;
  srun.tasks_per_node = 4;
  srun.nodes = 2;
  srun.nodelist = {"node1", "node2"};
  srun.master_addr = "node1";
  EXPECT_EQ(describe_srun_plan(srun),
            "8 ranks through srun, 4 per node, 2 nodes, on node1 node2; MASTER_ADDR=node1 MASTER_PORT=29500");
  srun = SrunPlan{};
  EXPECT_EQ(describe_srun_plan(srun), "the allocation's ranks through srun; MASTER_ADDR=127.0.0.1 MASTER_PORT=29500");
  LaunchPlan mpirun;
  mpirun.gpu = true;
  mpirun.hosts = {{"node1", {0, 2}, {"0", "2"}}, {"node2", {1}, {"1"}}};
  mpirun.master_addr = "node1";
  EXPECT_EQ(describe_mpirun_plan(mpirun),
            "3 ranks on 2 hosts (GPU slots): node1 [0,2], node2 [1]; MASTER_ADDR=node1 MASTER_PORT=29500");
}

}  // namespace
}  // namespace stratum::distributed::launch
