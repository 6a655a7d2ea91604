// DeepSpeed hostfile parsing and host name validation.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "../../common/error_of.h"
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
  EXPECT_NE(msg.find("--hostfile " + path + ".missing: cannot read it"), std::string::npos) << msg;
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
