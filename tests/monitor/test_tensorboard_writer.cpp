// The TensorBoard event file's framing against the TFRecord specification:
// masked CRC-32C (a known vector), each record's length and checksums, the
// file_version event first, and a scalar's protocol-buffer bytes by hand.
// (TensorBoard's own reader reads a training run's file: run_records_read_back.)
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "stratum/core/fs.h"
#include "stratum/monitor/tensorboard_writer.h"

using namespace stratum::monitor;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
template <class T>
T at(const std::string& s, size_t offset) {
  T v;
  std::memcpy(&v, s.data() + offset, sizeof v);
  return v;
}
}  // namespace

TEST(TensorBoardWriter, MaskedCrcIsTensorFlows) {
  // crc32c("123456789") = 0xe3069283; masked: rotate right by 15, add 0xa282ead8.
  EXPECT_EQ(tfrecord_masked_crc("123456789", 9), 0xc78ab0e5u);
  EXPECT_EQ(tfrecord_masked_crc("", 0), 0xa282ead8u);
}

TEST(TensorBoardWriter, RecordsAreFramedAndChecksummed) {
  const std::string dir = stratum::fs::make_temp_directory("stratum_tb_");
  std::string path;
  {
    TensorBoardWriter w(dir + "/run");
    w.add_scalar("Train/Samples/train_loss", 2.5, 64);
    path = w.path();
  }
  EXPECT_NE(path.find("/run/events.out.tfevents."), std::string::npos) << path;
  const std::string file = read_all(path);
  std::vector<std::string> events;
  for (size_t off = 0; off < file.size();) {
    ASSERT_LE(off + 12, file.size());
    const uint64_t length = at<uint64_t>(file, off);
    EXPECT_EQ(at<uint32_t>(file, off + 8), tfrecord_masked_crc(file.data() + off, 8));
    ASSERT_LE(off + 12 + length + 4, file.size());
    const std::string event = file.substr(off + 12, length);
    EXPECT_EQ(at<uint32_t>(file, off + 12 + length), tfrecord_masked_crc(event.data(), event.size()));
    events.push_back(event);
    off += 12 + length + 4;
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_NE(events[0].find("brain.Event:2"), std::string::npos);
  // The scalar: wall_time (0x09 + 8 bytes), step 64 (0x10 0x40), summary (0x2a, len) holding
  // value (0x0a, len) of tag (0x0a, len, text) and simple_value (0x15 + float 2.5).
  const std::string& e = events[1];
  ASSERT_GE(e.size(), 12u);
  EXPECT_EQ(static_cast<unsigned char>(e[0]), 0x09);
  EXPECT_EQ(static_cast<unsigned char>(e[9]), 0x10);
  EXPECT_EQ(static_cast<unsigned char>(e[10]), 0x40);
  EXPECT_EQ(static_cast<unsigned char>(e[11]), 0x2a);
  const std::string tag = "Train/Samples/train_loss";
  const size_t t = e.find(tag);
  ASSERT_NE(t, std::string::npos);
  EXPECT_EQ(static_cast<unsigned char>(e[t - 1]), tag.size());
  EXPECT_EQ(static_cast<unsigned char>(e[t + tag.size()]), 0x15);
  EXPECT_EQ(at<float>(e, t + tag.size() + 1), 2.5f);
  stratum::fs::remove_tree(dir);
}
