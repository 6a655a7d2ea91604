// stratum-train when things are wrong: --resume never trains over
// checkpoints it cannot name, a corrupt or hostile checkpoint ends the job in
// seconds naming the rank, the file and the key (not after the collective
// timeout), stratum-ckpt info --verify checks every tensor, and flags out of
// range are refused.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"
#include "train_cli.h"

namespace {

using namespace stratum::test::train_cli;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has(const Result& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

TEST_F(TrainCli, ResumeWithoutLatestNamesTheCheckpointsInsteadOfStartingFresh) {
  ASSERT_EQ(run(train_cmd(dir_, 2, "--sample-tokens 0")).status, 0);
  ASSERT_EQ(::unlink((dir_ + "/ckpt/latest").c_str()), 0);
  Result r = run(train_cmd(dir_, 4, "--sample-tokens 0 --resume"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, dir_ + "/ckpt: no 'latest' file, but the directory holds checkpoints global_step2; pass "
                         "--resume-tag global_step2")) << r.output;
  EXPECT_FALSE(has(r, "starting fresh")) << r.output;
  EXPECT_FALSE(stratum::fs::exists(dir_ + "/ckpt/global_step4")) << "it trained anyway";

  r = run(train_cmd(dir_, 4, "--sample-tokens 0 --resume-tag global_step2"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "resumed at step 2")) << r.output;

  // An empty directory starts fresh, and says so.
  const std::string empty = dir_ + "/empty";
  stratum::fs::make_directories(empty + "/ckpt");
  r = run(train_cmd(empty, 1, "--sample-tokens 0 --resume"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "--resume: " + empty + "/ckpt holds no checkpoint yet; starting fresh")) << r.output;
}

// The job once waited out the 10-minute collective timeout here: rank 0 alone
// failed on the manifest while rank 1 waited for it.
TEST_F(TrainCli, ResumeFromAnInvalidManifestEndsInSecondsNamingTheKey) {
  ASSERT_EQ(run(train_cmd(dir_, 2, "--sample-tokens 0")).status, 0);
  const std::string path = dir_ + "/ckpt/global_step2/manifest.json";
  auto m = nlohmann::json::parse(read_file(path));
  m.erase("zero_stage");
  std::ofstream(path) << m.dump();
  Result r = run(train_cmd(dir_, 4, "--sample-tokens 0 --resume"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, path + ": invalid checkpoint manifest (1 problem):")) << r.output;
  EXPECT_TRUE(has(r, "zero_stage: missing")) << r.output;
  EXPECT_FALSE(has(r, "json.exception")) << r.output;
  EXPECT_LT(r.seconds, 60.0) << r.output;
}

TEST_F(TrainCli, CorruptShardIsNamedByItsRankAndVerifyFindsIt) {
  ASSERT_EQ(run(train_cmd(dir_, 2, "--sample-tokens 0")).status, 0);
  const std::string tag = dir_ + "/ckpt/global_step2";
  Result v = run(kBin + "/stratum-ckpt info " + dir_ + "/ckpt --verify");
  EXPECT_EQ(v.status, 0) << v.output;
  EXPECT_TRUE(has(v, "checksums     CRC-32C per tensor")) << v.output;
  EXPECT_TRUE(has(v, "verified      2 shards,")) << v.output;

  // One flipped bit in the data of rank 1's shard: rank 1 reads it when resuming.
  const std::string shard = tag + "/rank_00001.safetensors";
  const auto header = stratum::io::read_safetensors_header(shard);
  const uint64_t at = 8 + header.header_length + header.tensors.front().begin + 2;
  const int fd = ::open(shard.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, static_cast<off_t>(at)), 1);
  byte ^= 0x01;
  ASSERT_EQ(::pwrite(fd, &byte, 1, static_cast<off_t>(at)), 1);
  ::close(fd);

  Result r = run(train_cmd(dir_, 4, "--sample-tokens 0 --resume"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[rank 1] error: " + shard + ": tensor '" + header.tensors.front().name + "' is corrupt"))
      << r.output;
  EXPECT_TRUE(has(r, "stratum-run: job failed: rank 1 (host localhost, local rank 1)")) << r.output;
  EXPECT_LT(r.seconds, 60.0) << r.output;

  v = run(kBin + "/stratum-ckpt info " + dir_ + "/ckpt --verify");
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_TRUE(has(v, shard + ": tensor '" + header.tensors.front().name + "' is corrupt: its CRC-32C is")) << v.output;
}

TEST_F(TrainCli, LatestOutsideItsDirectoryIsRefused) {
  ASSERT_EQ(run(train_cmd(dir_, 1, "--sample-tokens 0")).status, 0);
  std::ofstream(dir_ + "/ckpt/latest") << "../../elsewhere/global_step1\n";
  Result r = run(kBin + "/stratum-ckpt info " + dir_ + "/ckpt");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r, dir_ + "/ckpt/latest: does not hold a tag name")) << r.output;
}

TEST(TrainFlags, OutOfRangeFlagsAreRefusedWithTheFlagNamed) {
  for (const std::string flag : {"--steps -1", "--eval-every -5", "--top-k -5", "--temperature -1",
                                 "--eval-fraction 2", "--save-every -3", "--eval-batches 0"}) {
    Result r = run(kBin + "/stratum-train --config x.json " + flag);
    EXPECT_EQ(r.status, 2) << flag << ": " << r.output;
    const std::string name = flag.substr(0, flag.find(' '));
    EXPECT_TRUE(has(r, "stratum-train: error: " + name + ": Value")) << flag << ": " << r.output;
  }
}

}  // namespace
