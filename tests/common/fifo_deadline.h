#pragma once
// Reading a FIFO must not block. A test that calls a reader on one runs it on
// a thread; if the reader has not returned in time, the test opens the FIFO
// for writing (so a reader blocked in open() goes on, and reads EOF) and fails
// instead of hanging until CTest's time limit.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace stratum::test {

// True when f() returned within `seconds`.
template <class F>
bool returns_without_blocking(const std::string& fifo, F&& f, int seconds = 5) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  if (done.wait_for(std::chrono::seconds(seconds)) == std::future_status::ready) {
    done.get();
    return true;
  }
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // ENXIO until a reader waits
    if (fd >= 0) ::close(fd);
  }
  done.get();
  return false;
}

}  // namespace stratum::test
