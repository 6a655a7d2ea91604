#pragma once
// TensorBoard event files (the ds_config `tensorboard` section), written
// without TensorFlow: a TFRecord stream of Event protocol buffers, encoded by
// hand. The file is `events.out.tfevents.<seconds>.<host>` in the directory,
// as TensorBoard expects; its first record is the file_version event, then
// one Event holding a scalar Summary per add_scalar(). Flushed on flush() and
// when destroyed, so that TensorBoard shows a run while it trains.
//
// Format: record = uint64 length, uint32 masked CRC-32C of the length,
// the Event bytes, uint32 masked CRC-32C of the bytes (little-endian); the
// mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8. Event: wall_time = 1
// (double), step = 2 (int64), file_version = 3 (string), summary = 5;
// Summary: value = 1 (repeated); Value: tag = 1 (string), simple_value = 2 (float).
#include <cstdint>
#include <cstdio>
#include <string>

namespace stratum::monitor {

class TensorBoardWriter {
 public:
  // Creates `directory`. Throws stratum::Error naming the file when it cannot be written.
  explicit TensorBoardWriter(const std::string& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::string path_;
  FILE* file_ = nullptr;
};

// The masked CRC-32C of a TFRecord (exposed for tests).
uint32_t tfrecord_masked_crc(const void* data, size_t size);

}  // namespace stratum::monitor
