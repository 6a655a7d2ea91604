// Corrupt checkpoints are named, never loaded: a flipped bit (CRC-32C), NaN
// written into a shard, an invalid manifest; whichever rank meets the problem,
// every rank ends with an AgreedError at once (none waits in a collective).
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../distributed/distributed_test_context.h"
#include "ckpt_trainer.h"
#include "../engine/shared_temp_dir.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/core/crc32c.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/io/safetensors.h"

using namespace stratum;
using stratum::test::Trainer;

namespace {

struct Saved {
  std::string dir, shard, tensor;  // the last rank's shard and its first tensor
  uint64_t data_offset = 0;        // file offset of that tensor's bytes
};

// A checkpoint saved by every rank (ZeRO-1), and where the last rank's first tensor lies.
Saved save_one(const std::string& prefix) {
  auto world = test::context().cpu_world;
  Saved s;
  s.dir = test::shared_temp_dir(prefix);
  Trainer t(1, world);
  t.train_step(0);
  save_checkpoint(t.engine->core(), s.dir, "global_step1", {});
  s.shard = s.dir + "/global_step1/rank_" + std::string(5 - std::to_string(world->size() - 1).size(), '0') +
            std::to_string(world->size() - 1) + ".safetensors";
  const auto header = io::read_safetensors_header(s.shard);
  s.tensor = header.tensors.front().name;
  s.data_offset = 8 + header.header_length + header.tensors.front().begin;
  return s;
}

void patch(const std::string& file, uint64_t offset, const void* bytes, size_t n) {
  const int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << file;
  ASSERT_EQ(::pwrite(fd, bytes, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  ::close(fd);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loads on every rank; returns this rank's AgreedError (fails the test if none).
std::optional<AgreedError> load_error(const std::string& dir) {
  Trainer loader(1, test::context().cpu_world);
  try {
    load_checkpoint(loader.engine->core(), dir);
  } catch (const AgreedError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an AgreedError: " << e.what();
    return std::nullopt;
  }
  ADD_FAILURE() << "a corrupt checkpoint loaded";
  return std::nullopt;
}

void cleanup(const std::string& dir) {
  test::context().cpu_world->barrier()->wait();
  if (test::context().cpu_world->rank() == 0) fs::remove_tree(dir);
}

TEST(CheckpointIntegrity, FlippedBitIsNamedByTheRankThatReadsItAndEndsEveryRank) {
  auto world = test::context().cpu_world;
  const Saved s = save_one("stratum_ckpt_bitflip_");
  if (world->rank() == 0) {
    char byte = 0;
    std::ifstream(s.shard, std::ios::binary).seekg(static_cast<std::streamoff>(s.data_offset + 1)).read(&byte, 1);
    byte ^= 0x10;
    patch(s.shard, s.data_offset + 1, &byte, 1);
  }
  world->barrier()->wait();
  auto e = load_error(s.dir);
  ASSERT_TRUE(e);
  const std::string what = e->what();
  // The last rank's own fragments are in the last shard: it is the one that fails.
  if (world->rank() == world->size() - 1) {
    EXPECT_TRUE(e->failed_here());
    EXPECT_TRUE(e->report());
    EXPECT_NE(what.find(s.shard + ": tensor '" + s.tensor + "' is corrupt: its CRC-32C is"), std::string::npos) << what;
  } else {
    EXPECT_FALSE(e->failed_here());
    EXPECT_NE(what.find("failed on rank " + std::to_string(world->size() - 1)), std::string::npos) << what;
  }
  cleanup(s.dir);
}

TEST(CheckpointIntegrity, NaNWrittenIntoAShardIsRefusedEvenWithAMatchingChecksum) {
  auto world = test::context().cpu_world;
  const Saved s = save_one("stratum_ckpt_nan_");
  if (world->rank() == 0) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    patch(s.shard, s.data_offset, &nan, sizeof nan);
    // Recompute that tensor's checksum, as a careless edit (or a diverged run) would leave it.
    const at::Tensor t = io::read_safetensors(s.shard, {s.tensor}).at(s.tensor);
    const std::string manifest_path = s.dir + "/global_step1/manifest.json";
    auto m = nlohmann::json::parse(read_file(manifest_path));
    m["shards"][world->size() - 1]["checksums"][s.tensor] = crc32c_hex(crc32c(t.data_ptr(), t.nbytes()));
    std::ofstream(manifest_path) << m.dump();
  }
  world->barrier()->wait();
  auto e = load_error(s.dir);
  ASSERT_TRUE(e);
  if (world->rank() == world->size() - 1)
    EXPECT_NE(std::string(e->what()).find("'" + s.tensor + "' holds NaN or infinite values"), std::string::npos)
        << e->what();
  cleanup(s.dir);
}

// A manifest every rank reads: all fail alike, and the lowest rank speaks for them.
TEST(CheckpointIntegrity, InvalidManifestEndsEveryRankNamingTheKey) {
  auto world = test::context().cpu_world;
  const Saved s = save_one("stratum_ckpt_manifest_");
  const std::string manifest_path = s.dir + "/global_step1/manifest.json";
  if (world->rank() == 0) {
    auto m = nlohmann::json::parse(read_file(manifest_path));
    m.erase("zero_stage");
    m["global_steps"] = -4;
    std::ofstream(manifest_path) << m.dump();
  }
  world->barrier()->wait();
  auto e = load_error(s.dir);
  ASSERT_TRUE(e);
  const std::string what = e->what();
  EXPECT_TRUE(e->failed_here());
  EXPECT_EQ(e->report(), world->rank() == 0);
  EXPECT_NE(what.find(manifest_path + ": invalid checkpoint manifest (2 problems)"), std::string::npos) << what;
  EXPECT_NE(what.find("global_steps: expected 0..9223372036854775807, got -4"), std::string::npos) << what;
  EXPECT_NE(what.find("zero_stage: missing"), std::string::npos) << what;
  cleanup(s.dir);
}

TEST(CheckpointIntegrity, VerifyReadsEveryTensorAndNamesACorruptOne) {
  auto world = test::context().cpu_world;
  const Saved s = save_one("stratum_ckpt_verify_");
  if (world->rank() == 0) {
    const std::string tag_dir = s.dir + "/global_step1";
    const CheckpointVerification v = verify_checkpoint(tag_dir);
    EXPECT_EQ(v.shards, world->size());
    EXPECT_TRUE(v.checksums);
    int64_t tensors = 0;
    for (int r = 0; r < world->size(); ++r) tensors += static_cast<int64_t>(io::read_safetensors_header(
        tag_dir + "/rank_0000" + std::to_string(r) + ".safetensors").tensors.size());
    EXPECT_EQ(v.tensors, tensors);
    const char zero[4] = {0, 0, 0, 0};
    patch(s.shard, s.data_offset, zero, 4);
    try {
      verify_checkpoint(tag_dir);
      ADD_FAILURE() << "verified a corrupt checkpoint";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(s.shard + ": tensor '" + s.tensor + "' is corrupt"), std::string::npos)
          << e.what();
    }
  }
  cleanup(s.dir);
}

}  // namespace
