// DeepSpeed hostfile parsing and host name validation.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "../../common/error_of.h"
#include "../../common/fifo_deadline.h"
#include "stratum/core/error.h"
#include "stratum/distributed/launch/hostfile.h"

namespace stratum::distributed::launch {
namespace {

using test::error_of;

TEST(Hostfile, CommentsBlankLinesAndWhitespace) {
  const auto hosts = parse_hostfile(
      "# cluster\n"
      "\n"
      "worker-1 slots=4\n"
      "   \t\n"
      "\tworker-2\tslots=2   # two GPUs here\n"
      "10.0.0.3 slots=8\r\n"
      "#worker-4 slots=4\n",
      "hf");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "worker-1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[0].line, 3);
  EXPECT_EQ(hosts[1].name, "worker-2");
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[1].line, 5);
  EXPECT_EQ(hosts[2].name, "10.0.0.3");
  EXPECT_EQ(hosts[2].slots, 8);
}

TEST(Hostfile, NoTrailingNewline) {
  const auto hosts = parse_hostfile("a slots=1\nb slots=2", "hf");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[1].name, "b");
}

TEST(Hostfile, MissingSlotsNamesFileAndLine) {
  const auto msg = error_of([] { parse_hostfile("a slots=1\n\nworker-2\n", "/etc/hf"); });
  EXPECT_NE(msg.find("/etc/hf:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing slots"), std::string::npos) << msg;
}

TEST(Hostfile, MalformedLines) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"a slots=0\n", "hf:1: slots=0"},
      {"a slots=\n", "hf:1: slots must be a positive whole number"},
      {"a slots=two\n", "hf:1: slots must be a positive whole number"},
      {"a slots=-1\n", "hf:1: slots must be a positive whole number"},
      {"a slots=2x\n", "hf:1: slots must be a positive whole number"},
      {"a slots=99999999999\n", "hf:1: slots must be a positive whole number"},
      {"a slots=1025\n", "hf:1: slots=1025 for host 'a' is over the limit of 1024 slots per host"},
      {"# c\na slots=1 extra\n", "hf:2: expected 'hostname slots=N', got 'a slots=1 extra'"},
      {"a gpus=2\n", "hf:1: expected 'hostname slots=N'"},
      {"a slots = 2\n", "hf:1: expected 'hostname slots=N'"},
  };
  for (const auto& c : cases) {
    const auto msg = error_of([&] { parse_hostfile(c.text, "hf"); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "input: " << c.text << "\nmessage: " << msg;
  }
}

TEST(Hostfile, DuplicateHostNamesBothLines) {
  const auto msg = error_of([] { parse_hostfile("a slots=1\nb slots=1\n# x\na slots=2\n", "hf"); });
  EXPECT_NE(msg.find("hf:4:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a' is listed twice (lines 1 and 4)"), std::string::npos) << msg;
}

TEST(Hostfile, BadHostNameIsRejectedWithLine) {
  const auto msg = error_of([] { parse_hostfile("good slots=1\nfoo;rm slots=2\n", "hf"); });
  EXPECT_NE(msg.find("hf:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'foo;rm' is not a valid host name"), std::string::npos) << msg;
  // A name with a shell command in it splits into more words: still an error at its line.
  const auto msg2 = error_of([] { parse_hostfile("$(reboot) slots=1\n", "hf"); });
  EXPECT_NE(msg2.find("hf:1:"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("not a valid host name"), std::string::npos) << msg2;
  const auto msg3 = error_of([] { parse_hostfile("foo;rm -rf / slots=1\n", "hf"); });
  EXPECT_NE(msg3.find("hf:1:"), std::string::npos) << msg3;
}

TEST(Hostfile, EmptyFileIsAnError) {
  const auto msg = error_of([] { parse_hostfile("# nothing\n\n", "hf"); });
  EXPECT_NE(msg.find("hf: the hostfile lists no hosts"), std::string::npos) << msg;
}

TEST(Hostfile, ReadFromDiskAndMissingFile) {
  const std::string path = ::testing::TempDir() + "stratum_hostfile_test";
  {
    std::ofstream out(path);
    out << "node1 slots=2\nnode2 slots=3\n";
  }
  const auto hosts = read_hostfile(path);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[1].slots, 3);
  std::remove(path.c_str());
  const auto msg = error_of([&] { read_hostfile(path + ".missing"); });
  EXPECT_NE(msg.find("--hostfile " + path + ".missing: cannot read hostfile"), std::string::npos) << msg;
}

// /dev/zero was read until memory ran out, a FIFO blocked forever.
TEST(Hostfile, OnlyRegularFilesOfAtMostAMegabyteAreRead) {
  auto msg = error_of([] { read_hostfile("/dev/zero"); });
  EXPECT_NE(msg.find("--hostfile /dev/zero: hostfile must be a regular file, but this is a character device"),
            std::string::npos)
      << msg;
  const std::string fifo = ::testing::TempDir() + "stratum_hostfile_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(test::returns_without_blocking(fifo, [&] { msg = error_of([&] { read_hostfile(fifo); }); }))
      << "reading a FIFO as a hostfile blocked";
  EXPECT_NE(msg.find("--hostfile " + fifo + ": hostfile must be a regular file, but this is a FIFO"), std::string::npos)
      << msg;
  std::remove(fifo.c_str());
  const std::string big = ::testing::TempDir() + "stratum_hostfile_big";
  {
    std::ofstream out(big);
    out << "node1 slots=1\n" << std::string(2 << 20, '#') << "\n";
  }
  msg = error_of([&] { read_hostfile(big); });
  EXPECT_NE(msg.find("hostfile is 2097.2 kB, over the limit of 1048.6 kB"), std::string::npos) << msg;
  std::remove(big.c_str());
}

// slots=1000000000 was accepted and became a billion device entries.
TEST(Hostfile, SlotsAndLinesAreBounded) {
  EXPECT_EQ(parse_hostfile("a slots=1024\n", "hf")[0].slots, 1024);
  auto msg = error_of([] { parse_hostfile("a slots=1\nb slots=1000000000\n", "hf"); });
  EXPECT_NE(msg.find("hf:2: slots=1000000000 for host 'b' is over the limit of 1024 slots per host"),
            std::string::npos)
      << msg;
  std::string many;
  for (int i = 0; i < 65; ++i) many += "h" + std::to_string(i) + " slots=1024\n";
  msg = error_of([&] { parse_hostfile(many, "hf"); });
  EXPECT_NE(msg.find("hf:65: the hosts up to this line have 66560 slots in all, over the limit of 65536"),
            std::string::npos)
      << msg;
  std::string lines(4096, '\n');
  EXPECT_NE(error_of([&] { parse_hostfile(lines + "a slots=1", "hf"); }).find("hf: more than 4096 lines"),
            std::string::npos);
  EXPECT_EQ(parse_hostfile(std::string(4095, '\n') + "a slots=1", "hf").size(), 1u);
  EXPECT_EQ(parse_hostfile(std::string(4095, '\n') + "a slots=1\n", "hf").size(), 1u);  // 4096 lines, newline-ended
}

// Open MPI 4.1's mpirun crashed ("stack smashing detected") on a remote host
// whose first label had 57+ characters; with names kept whole (as Stratum now
// passes them) the whole name counts. Stratum took names up to 253.
TEST(Hostfile, HostNamesOpenMpiCannotTakeAreRefused) {
  const std::string ok = std::string(44, 'n') + ".example.com";  // 56 characters
  EXPECT_EQ(parse_hostfile(ok + " slots=1\n", "hf")[0].name, ok);
  const std::string bad = std::string(45, 'n') + ".example.com";
  auto msg = error_of([&] { parse_hostfile("a slots=1\n" + bad + " slots=1\n", "hf"); });
  EXPECT_NE(msg.find("hf:2: host '" + bad + "' has 57 characters; Open MPI 4.1's mpirun aborts (stack smashing) on "
                     "host names of 57 or more"),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of([] { check_launch_host(std::string(57, 'x'), "host"); }).find("has 57 characters"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_launch_host("::1", "host"); }).find("does not take IPv6 literals"), std::string::npos);
  EXPECT_TRUE(is_valid_hostname(std::string(63, 'x')));  // still a host name (for --master_addr)
}

// Open MPI cut 999.999.999.999 to "999" and ran there; a name of numbers only
// is what resolvers read as an IPv4 address, so it must be a valid one.
TEST(Hostname, NumbersOnlyMustBeAValidIpv4Address) {
  for (const char* name : {"999.999.999.999", "256.1.1.1", "1.2.3", "10.1", "123", "1.2.3.4.5", "01.2.3.4",
                           "0x7f.1", "0x7f000001"})
    EXPECT_FALSE(is_valid_hostname(name)) << name;
  for (const char* name : {"0.0.0.0", "255.255.255.255", "192.168.1.20", "10.0.0.1x", "1a.2.3.4", "node-1.10",
                           "0xg.1"})
    EXPECT_TRUE(is_valid_hostname(name)) << name;
  const auto msg = error_of([] { parse_hostfile("999.999.999.999 slots=2\n", "hf"); });
  EXPECT_NE(msg.find("hf:1: '999.999.999.999' is not a valid IPv4 address"), std::string::npos) << msg;
}

TEST(Hostname, Valid) {
  for (const char* name : {"localhost", "node-1", "a", "gpu01.cluster.example.com", "127.0.0.1", "10.1.2.3",
                           "xn--bcher-kva.example", "::1", "fe80::1", "2001:db8::42", "A-B"}) {
    EXPECT_TRUE(is_valid_hostname(name)) << name;
  }
  EXPECT_TRUE(is_valid_hostname(std::string(63, 'a')));
  EXPECT_TRUE(is_ipv6_literal("::1"));
  EXPECT_FALSE(is_ipv6_literal("localhost"));
}

TEST(Hostname, Invalid) {
  for (const char* name : {"", "-a", "a-", "a..b", ".a", "a.", "a_b", "foo;rm", "$(reboot)", "a b", "a\nb",
                           "host:1", "`id`", "a|b", "a&b", "../x", "h*", "::g"}) {
    EXPECT_FALSE(is_valid_hostname(name)) << name;
  }
  EXPECT_FALSE(is_valid_hostname(std::string(64, 'a')));
  std::string long_name;
  for (int i = 0; i < 64; ++i) long_name += "abc.";
  long_name += "x";
  EXPECT_FALSE(is_valid_hostname(long_name));
}

TEST(Hostname, CheckNamesTheSource) {
  const auto msg = error_of([] { check_hostname("a\x01;b", "--master_addr"); });
  EXPECT_NE(msg.find("--master_addr: 'a\\x01;b' is not a valid host name"), std::string::npos) << msg;
  EXPECT_EQ(error_of([] { check_hostname("node1", "x"); }), "");
}

}  // namespace
}  // namespace stratum::distributed::launch
