#include "stratum/monitor/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "stratum/core/crc32c.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::monitor {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <class T>
void little_endian(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86 and ARM Linux are little-endian
  out.append(bytes, sizeof(T));
}

// A length-delimited field (wire type 2).
void bytes_field(std::string& out, int field, const std::string& payload) {
  varint(out, static_cast<uint64_t>(field) << 3 | 2);
  varint(out, payload.size());
  out += payload;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  varint(e, 1 << 3 | 1);  // wall_time, fixed64
  little_endian(e, wall_time);
  varint(e, 2 << 3 | 0);  // step, varint
  varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t tfrecord_masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& directory) {
  fs::make_directories(directory);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = directory + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." + host +
          "." + std::to_string(getpid());
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw Error(path_ + ": cannot create the TensorBoard event file: " + std::strerror(errno));
  std::string first = event_header(now_seconds(), 0);
  bytes_field(first, 3, "brain.Event:2");
  write_record(first);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string v;
  bytes_field(v, 1, tag);
  varint(v, 2 << 3 | 5);  // simple_value, fixed32
  little_endian(v, static_cast<float>(value));
  std::string summary;
  bytes_field(summary, 1, v);
  std::string event = event_header(now_seconds(), step);
  bytes_field(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string record;
  const uint64_t length = event.size();
  little_endian(record, length);
  little_endian(record, tfrecord_masked_crc(&length, sizeof length));
  record += event;
  little_endian(record, tfrecord_masked_crc(event.data(), event.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    throw Error(path_ + ": writing a TensorBoard event failed: " + std::strerror(errno));
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0) throw Error(path_ + ": flushing the TensorBoard events failed: " + std::strerror(errno));
}

}  // namespace stratum::monitor
