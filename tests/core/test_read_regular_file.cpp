// fs::read_regular_file: what a config, hostfile, manifest or `latest` is read
// with. A FIFO, /dev/zero, a directory or an oversized file is refused at
// once, naming the path; a link is refused when asked.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "../common/error_of.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_depth.h"

namespace {

using namespace stratum;

using stratum::test::error_of;

class ReadRegularFile : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum_read_"); }
  void TearDown() override { fs::remove_tree(dir_); }
  std::string dir_;
};

TEST_F(ReadRegularFile, ReadsAFileWithinTheLimit) {
  std::ofstream(dir_ + "/a") << "hello";
  EXPECT_EQ(fs::read_regular_file(dir_ + "/a", 5, "the thing"), "hello");
}

TEST_F(ReadRegularFile, RefusesAFifoWithoutBlocking) {
  const std::string fifo = dir_ + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { fs::read_regular_file(fifo, 1000, "the config"); });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_NE(e.find(fifo + ": the config must be a regular file, but this is a FIFO (named pipe)"), std::string::npos) << e;
}

TEST_F(ReadRegularFile, RefusesDevicesDirectoriesAndLargeFiles) {
  EXPECT_NE(error_of([] { fs::read_regular_file("/dev/zero", 1 << 20, "the hostfile"); }).find("a character device"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fs::read_regular_file(dir_, 1 << 20, "x"); }).find("a directory"), std::string::npos);
  std::ofstream(dir_ + "/big") << std::string(2000, 'x');
  const std::string e = error_of([&] { fs::read_regular_file(dir_ + "/big", 1000, "the config"); });
  EXPECT_NE(e.find("the config is 2000 bytes, over the limit of 1000 bytes"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { fs::read_regular_file(dir_ + "/missing", 10, "x"); }).find("No such file"), std::string::npos);
}

TEST_F(ReadRegularFile, RefusesALinkWhenAsked) {
  std::ofstream(dir_ + "/target") << "secret first line\n";
  ASSERT_EQ(::symlink((dir_ + "/target").c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_EQ(fs::read_regular_file(dir_ + "/link", 100, "x"), "secret first line\n");
  const std::string e = error_of([&] { fs::read_regular_file(dir_ + "/link", 100, "the 'latest' file", false); });
  EXPECT_NE(e.find("must be a regular file, but this is a symbolic link"), std::string::npos) << e;
  EXPECT_EQ(e.find("secret"), std::string::npos) << e;
}

TEST(JsonDepth, FindsTheFirstBracketPastTheCapInLinearTime) {
  EXPECT_FALSE(find_excess_json_nesting(R"({"a": [1, {"b": [2]}]})", 4));
  EXPECT_EQ(find_excess_json_nesting(R"({"a": [1, {"b": [2]}]})", 3).value_or(0), 16u);
  EXPECT_EQ(find_excess_json_nesting(R"({"a": [1, {"b": [2]}]})", 2).value_or(0), 10u);
  EXPECT_FALSE(find_excess_json_nesting(R"({"a": "[[[[[[\"[[[["})", 1));  // brackets in strings do not count
  const std::string deep(1 << 20, '[');
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(find_excess_json_nesting(deep).value_or(0), static_cast<size_t>(kMaxJsonDepth));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
}

}  // namespace
