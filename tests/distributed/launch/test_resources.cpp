// --include / --exclude (DeepSpeed's syntax), --num_nodes, --num_gpus, GPU discovery.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../common/error_of.h"
#include "stratum/core/error.h"
#include "stratum/distributed/launch/resources.h"

namespace stratum::distributed::launch {
namespace {

using test::error_of;

std::vector<PoolHost> pool() {
  return pool_from_hostfile(parse_hostfile("worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=2\n", "hf"));
}

std::vector<int> slots_of(const std::vector<SelectedHost>& hosts, const std::string& name) {
  for (const auto& h : hosts)
    if (h.name == name) return h.slots;
  return {-1};
}

SelectionRequest include(const std::string& s) {
  SelectionRequest r;
  r.include = s;
  return r;
}
SelectionRequest exclude(const std::string& s) {
  SelectionRequest r;
  r.exclude = s;
  return r;
}

TEST(Resources, NoFilterTakesEverything) {
  const auto hosts = select_resources(pool(), {});
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(hosts[2].devices, (std::vector<std::string>{"0", "1"}));
}

TEST(Resources, IncludeDeepSpeedSyntax) {
  // "host1:0,2@host2": slots 0 and 2 of host1, all of host2.
  const auto hosts = select_resources(pool(), include("worker-0:0,2@worker-2"));
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(slots_of(hosts, "worker-0"), (std::vector<int>{0, 2}));
  EXPECT_EQ(hosts[0].devices, (std::vector<std::string>{"0", "2"}));
  EXPECT_EQ(slots_of(hosts, "worker-2"), (std::vector<int>{0, 1}));
}

TEST(Resources, IncludeKeepsHostfileOrderAndMergesRepeats) {
  const auto hosts = select_resources(pool(), include("worker-2:1@worker-0:3@worker-0:1"));
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].name, "worker-0");
  EXPECT_EQ(hosts[0].slots, (std::vector<int>{1, 3}));
  EXPECT_EQ(hosts[1].name, "worker-2");
  EXPECT_EQ(hosts[1].slots, (std::vector<int>{1}));
}

TEST(Resources, IncludeSingleHost) {
  const auto hosts = select_resources(pool(), include("worker-1"));
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].slots, (std::vector<int>{0, 1, 2, 3}));
}

TEST(Resources, ExcludeDeepSpeedSyntax) {
  // "host1:0@host2": drop slot 0 of host1 and all of host2.
  const auto hosts = select_resources(pool(), exclude("worker-0:0@worker-2"));
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(slots_of(hosts, "worker-0"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(slots_of(hosts, "worker-1"), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Resources, ExcludeEverySlotDropsTheHost) {
  const auto hosts = select_resources(pool(), exclude("worker-2:0,1"));
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[1].name, "worker-1");
}

TEST(Resources, ExcludeEverythingIsAnError) {
  const auto msg = error_of([] { select_resources(pool(), exclude("worker-0@worker-1@worker-2")); });
  EXPECT_NE(msg.find("leaves no devices"), std::string::npos) << msg;
}

TEST(Resources, UnknownHostListsKnownOnes) {
  const auto msg = error_of([] { select_resources(pool(), include("worker-0@worker-9:1")); });
  EXPECT_NE(msg.find("--include: unknown host 'worker-9' (known hosts: worker-0, worker-1, worker-2)"),
            std::string::npos)
      << msg;
  const auto msg2 = error_of([] { select_resources(pool(), exclude("nope")); });
  EXPECT_NE(msg2.find("--exclude: unknown host 'nope'"), std::string::npos) << msg2;
}

TEST(Resources, SlotOutOfRange) {
  const auto msg = error_of([] { select_resources(pool(), include("worker-2:0,2")); });
  EXPECT_NE(msg.find("--include: slot 2 of host 'worker-2' does not exist (it has 2 slots: slots 0-1)"),
            std::string::npos)
      << msg;
  const auto msg2 = error_of([] { select_resources(pool(), exclude("worker-0:-1")); });
  EXPECT_NE(msg2.find("slot -1 of host 'worker-0' does not exist"), std::string::npos) << msg2;
}

TEST(Resources, MalformedFilters) {
  struct Case {
    const char* filter;
    const char* expect;
  } cases[] = {
      {"worker-0:", "no slots after ':'"},
      {"worker-0:a", "slot 'a' is not a whole number"},
      {"worker-0:0,,1", "slot '' is not a whole number"},
      {"worker-0@@worker-1", "empty host entry"},
      {"worker-0@", "empty host entry"},
      {"foo;rm:0", "'foo;rm' is not a valid host name"},
  };
  for (const auto& c : cases) {
    const auto msg = error_of([&] { select_resources(pool(), include(c.filter)); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.filter << " -> " << msg;
  }
}

TEST(Resources, IncludeAndExcludeTogether) {
  SelectionRequest r;
  r.include = "worker-0";
  r.exclude = "worker-1";
  const auto msg = error_of([&] { select_resources(pool(), r); });
  EXPECT_NE(msg.find("--include and --exclude cannot be used together"), std::string::npos) << msg;
}

TEST(Resources, FilterWithNumNodesOrGpusIsAnError) {
  SelectionRequest r = include("worker-0");
  r.num_nodes = 1;
  EXPECT_NE(error_of([&] { select_resources(pool(), r); }).find("--num_nodes cannot be combined with --include"),
            std::string::npos);
  SelectionRequest r2 = exclude("worker-0");
  r2.per_node = 1;
  EXPECT_NE(error_of([&] { select_resources(pool(), r2); }).find("--num_gpus cannot be combined with --exclude"),
            std::string::npos);
}

TEST(Resources, NumNodesTakesTheFirstHosts) {
  SelectionRequest r;
  r.num_nodes = 2;
  const auto hosts = select_resources(pool(), r);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[1].name, "worker-1");
  r.num_nodes = 4;
  EXPECT_NE(error_of([&] { select_resources(pool(), r); }).find("--num_nodes 4: only 3 hosts are available"),
            std::string::npos);
  r.num_nodes = 0;
  EXPECT_NE(error_of([&] { select_resources(pool(), r); }).find("--num_nodes must be at least 1"), std::string::npos);
}

TEST(Resources, NumGpusPerNode) {
  SelectionRequest r;
  r.per_node = 2;
  const auto hosts = select_resources(pool(), r);
  ASSERT_EQ(hosts.size(), 3u);
  for (const auto& h : hosts) EXPECT_EQ(h.slots, (std::vector<int>{0, 1}));
  r.per_node = 3;  // worker-2 has 2
  const auto msg = error_of([&] { select_resources(pool(), r); });
  EXPECT_NE(msg.find("--num_gpus 3: host 'worker-2' has only 2 slots"), std::string::npos) << msg;
  r.num_nodes = 2;  // without worker-2, 3 per node fits
  EXPECT_EQ(select_resources(pool(), r).size(), 2u);
  r.per_node = 0;
  r.per_node_flag = "--num_procs";
  EXPECT_NE(error_of([&] { select_resources(pool(), r); }).find("--num_procs must be at least 1"), std::string::npos);
}

TEST(Resources, LocalHostWithNamedDevices) {
  // This machine with CUDA_VISIBLE_DEVICES=2,3: slot i is device devices[i].
  const std::vector<PoolHost> local = {make_pool_host("localhost", 2, {"2", "3"})};
  const auto hosts = select_resources(local, include("localhost:1"));
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].devices, (std::vector<std::string>{"3"}));
  const auto msg = error_of([&] { select_resources(local, include("localhost:2")); });
  EXPECT_NE(msg.find("slot 2 of host 'localhost' does not exist (it has 2 slots"), std::string::npos) << msg;
}

TEST(Resources, VisibleDevicesFollowCuda) {
  EXPECT_EQ(visible_devices("0,2", 4), (std::vector<std::string>{"0", "2"}));
  EXPECT_EQ(visible_devices(" 3 , 1", 4), (std::vector<std::string>{"3", "1"}));
  EXPECT_EQ(visible_devices("0,7,1", 4), (std::vector<std::string>{"0"}));  // CUDA stops at the invalid one
  EXPECT_EQ(visible_devices("-1", 4), (std::vector<std::string>{}));
  EXPECT_EQ(visible_devices("", 4), (std::vector<std::string>{}));
  EXPECT_EQ(visible_devices("1,1", 4), (std::vector<std::string>{"1"}));
  EXPECT_EQ(visible_devices("GPU-8f2a,GPU-77c1", 2), (std::vector<std::string>{"GPU-8f2a", "GPU-77c1"}));
  EXPECT_EQ(visible_devices("0,1", 0), (std::vector<std::string>{}));
}

TEST(Resources, DetectLocalGpusOverrideAndVisibleDevices) {
  ::setenv("STRATUM_NUM_GPUS", "3", 1);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  auto gpus = detect_local_gpus();
  EXPECT_EQ(gpus.devices, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(gpus.source, "STRATUM_NUM_GPUS");
  ::setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
  gpus = detect_local_gpus();
  EXPECT_EQ(gpus.devices, (std::vector<std::string>{"2", "0"}));
  ::setenv("STRATUM_NUM_GPUS", "zero", 1);
  EXPECT_NE(error_of([] { detect_local_gpus(); }).find("STRATUM_NUM_GPUS='zero'"), std::string::npos);
  ::setenv("STRATUM_NUM_GPUS", "100000000", 1);  // was a list of 100 million devices
  EXPECT_NE(error_of([] { detect_local_gpus(); }).find("STRATUM_NUM_GPUS='100000000' is not a whole number in 0..1024"),
            std::string::npos);
  ::unsetenv("STRATUM_NUM_GPUS");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

// No per-slot list is built past the bound, whoever asks.
TEST(Resources, PoolHostsAreBounded) {
  EXPECT_EQ(make_pool_host("a", 1024).slots(), 1024);
  EXPECT_NE(error_of([] { make_pool_host("a", 1'000'000'000); }).find("host 'a': 1000000000 slots is over the limit of 1024"),
            std::string::npos);
}

// A long --include over a big pool scanned the pool per entry, and an unknown
// host's message listed every host.
TEST(Resources, LongFiltersOverBigPoolsStayFast) {
  std::string hostfile, filter;
  for (int i = 0; i < 4000; ++i) hostfile += "node-" + std::to_string(i) + " slots=16\n";
  for (int i = 0; i < 200'000; ++i) filter += (i ? "@node-" : "node-") + std::to_string(i % 4000);
  const auto big = pool_from_hostfile(parse_hostfile(hostfile, "hf"));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(select_resources(big, include(filter)).size(), 4000u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  const auto msg = error_of([&] { select_resources(big, include("node-1@nohost")); });
  EXPECT_NE(msg.find("unknown host 'nohost' (known hosts: node-0, node-1, node-2, node-3, node-4, node-5, node-6, "
                     "node-7, node-8, node-9 and 3990 more)"),
            std::string::npos)
      << msg.substr(0, 300);
}

}  // namespace
}  // namespace stratum::distributed::launch
