#include "stratum/distributed/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace stratum::distributed {
namespace {

std::string seconds_text(int64_t us) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(us / 1000000),
                static_cast<long long>(us % 1000000));
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

int64_t flight_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string flight_file(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".txt"; }

FlightRecorder::FlightRecorder(int rank, int world_size, size_t capacity)
    : rank_(rank), world_size_(world_size), ring_(capacity == 0 ? 1 : capacity) {}

FlightRecorder::~FlightRecorder() {
  if (flusher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(flush_mutex_);
      stop_ = true;
    }
    flush_cv_.notify_all();
    flusher_.join();
  }
  write_file("exit");
}

int FlightRecorder::add_group(const std::string& name, const std::string& backend,
                              const std::vector<int64_t>& world_ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < groups_.size(); ++i)
    if (groups_[i].name == name && groups_[i].backend == backend && groups_[i].ranks == world_ranks)
      return static_cast<int>(i);
  groups_.push_back(FlightGroup{name, backend, world_ranks, 0, 0, std::vector<uint64_t>(world_ranks.size(), 0),
                                std::vector<uint64_t>(world_ranks.size(), 0)});
  ++version_;
  return static_cast<int>(groups_.size() - 1);
}

void FlightRecorder::count_p2p(int group, int peer, bool send) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (group < 0 || static_cast<size_t>(group) >= groups_.size()) return;
  auto& counts = send ? groups_[group].sent : groups_[group].received;
  if (peer >= 0 && static_cast<size_t>(peer) < counts.size()) ++counts[peer];
}

uint64_t FlightRecorder::begin(int group, uint64_t seq, const char* op, int64_t bytes, int peer, bool sends,
                               bool receives) {
  const int64_t now = flight_now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_id_++;
  FlightEntry e{id, seq, group, op, bytes, -1, 0, 0, now, 0, 0};
  if (group >= 0 && static_cast<size_t>(group) < groups_.size()) {
    FlightGroup& g = groups_[group];
    if (seq > g.issued) g.issued = seq;
    if (peer >= 0 && static_cast<size_t>(peer) < g.ranks.size()) {
      e.peer = g.ranks[peer];
      if (sends) e.sent = g.sent[peer];
      if (receives) e.received = g.received[peer];
    }
  }
  ring_[id % ring_.size()] = e;
  ++version_;
  return id;
}

void FlightRecorder::waiting(uint64_t id) {
  const int64_t now = flight_now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  FlightEntry& e = ring_[id % ring_.size()];
  if (e.id != id || e.end_us != 0 || e.wait_us != 0) return;
  e.wait_us = now;
  ++version_;
}

void FlightRecorder::end(uint64_t id) {
  const int64_t now = flight_now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  FlightEntry& e = ring_[id % ring_.size()];
  if (e.id != id || e.end_us != 0) return;
  e.end_us = now;
  if (e.group >= 0 && static_cast<size_t>(e.group) < groups_.size() && e.seq > groups_[e.group].completed)
    groups_[e.group].completed = e.seq;
  ++version_;
}

void FlightRecorder::drop(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  FlightEntry& e = ring_[id % ring_.size()];
  if (e.id != id) return;
  e = FlightEntry{};
  ++version_;
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<FlightEntry> out;
  out.reserve(ring_.size());
  // Slot id % n holds id: from the oldest id still in the ring to the newest.
  const uint64_t newest = next_id_ - 1;
  const uint64_t oldest = newest >= ring_.size() ? newest - ring_.size() + 1 : 1;
  for (uint64_t id = oldest; id <= newest; ++id) {
    const FlightEntry& e = ring_[id % ring_.size()];
    if (e.id == id) out.push_back(e);
  }
  return out;
}

std::vector<FlightGroup> FlightRecorder::groups() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return groups_;
}

std::string FlightRecorder::format(const std::string& reason) const {
  const std::vector<FlightEntry> list = entries();
  const std::vector<FlightGroup> table = groups();
  std::string out = "stratum-flight 1\n";
  out += "rank " + std::to_string(rank_) + " world " + std::to_string(world_size_) + " pid " +
         std::to_string(::getpid()) + " host " + host_name() + "\n";
  out += "written " + seconds_text(flight_now_us()) + " " + reason + "\n";
  for (size_t g = 0; g < table.size(); ++g) {
    std::string ranks;
    for (size_t i = 0; i < table[g].ranks.size(); ++i) {
      if (i) ranks += ',';
      ranks += std::to_string(table[g].ranks[i]);
    }
    out += "group " + std::to_string(g) + " issued " + std::to_string(table[g].issued) + " completed " +
           std::to_string(table[g].completed) + " backend " + table[g].backend + " ranks " + ranks + " name " +
           table[g].name + "\n";
  }
  for (size_t g = 0; g < table.size(); ++g)
    for (size_t p = 0; p < table[g].ranks.size(); ++p)
      if (table[g].sent[p] || table[g].received[p])
        out += "p2p " + std::to_string(g) + " peer " + std::to_string(table[g].ranks[p]) + " sent " +
               std::to_string(table[g].sent[p]) + " received " + std::to_string(table[g].received[p]) + "\n";
  for (const FlightEntry& e : list)
    out += "op " + std::to_string(e.id) + " group " + std::to_string(e.group) + " seq " + std::to_string(e.seq) + " " +
           e.op + " bytes " + std::to_string(e.bytes) + " peer " + std::to_string(e.peer) + " sent " +
           std::to_string(e.sent) + " received " + std::to_string(e.received) + " start " + seconds_text(e.start_us) +
           " wait " + (e.wait_us ? seconds_text(e.wait_us) : std::string("-")) + " end " +
           (e.end_us ? seconds_text(e.end_us) : std::string("-")) + "\n";
  return out;
}

void FlightRecorder::set_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  file_ = path;
}

std::string FlightRecorder::file() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return file_;
}

bool FlightRecorder::write_file(const std::string& reason) const noexcept {
  try {
    const std::string path = file();
    if (path.empty()) return false;
    const std::string text = format(reason);
    // Per writer thread: the flusher and an aborting thread may write at once.
    const size_t thread = std::hash<std::thread::id>()(std::this_thread::get_id()) % 100000;
    const std::string tmp = path + ".tmp" + std::to_string(thread);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    if (done != text.size() || ::rename(tmp.c_str(), path.c_str()) != 0) {
      ::unlink(tmp.c_str());
      return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

void FlightRecorder::flush_every(std::chrono::milliseconds period) {
  if (flusher_.joinable() || period.count() <= 0) return;
  flusher_ = std::thread([this, period] { flusher_loop(period); });
}

void FlightRecorder::flusher_loop(std::chrono::milliseconds period) {
  uint64_t written = ~uint64_t(0);
  std::unique_lock<std::mutex> lock(flush_mutex_);
  while (!stop_) {
    uint64_t now;
    {
      std::lock_guard<std::mutex> state(mutex_);
      now = version_;
    }
    if (now != written) {
      lock.unlock();
      write_file("periodic");
      lock.lock();
      written = now;
    }
    flush_cv_.wait_for(lock, period, [this] { return stop_; });
  }
}

void FlightRecorder::add_wait(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  waited_ += seconds;
}

double FlightRecorder::waited_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waited_;
}

}  // namespace stratum::distributed
