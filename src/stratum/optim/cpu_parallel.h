#pragma once
// The host optimizers' threads (cpu_adam, cpu_lamb): a c10 thread pool sized to
// the machine, and a loop that hands blocks of work to it one at a time.
//
// at::parallel_for is header code that runs in parallel only in translation
// units built with OpenMP, which Stratum's are not (a second OpenMP runtime next
// to torch's bundled one invites trouble): so a pool of our own, c10's; the
// caller works too.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <c10/core/thread_pool.h>

namespace stratum::optim::detail {

// std::thread::hardware_concurrency(), at least 1.
int hardware_threads();
// hardware_threads() - 1 workers (at least 1), made on first use.
c10::ThreadPool& worker_pool();

// Runs body(block) for every block in [0, blocks) on `threads` threads, blocks
// handed out one at a time (a shared machine slows some threads more than
// others). Which thread runs a block must not matter to the result.
template <class Body>
void for_each_block(int64_t blocks, int threads, const Body& body) {
  threads = static_cast<int>(std::min<int64_t>(threads, blocks));
  if (threads <= 1 || worker_pool().inThreadPool()) {
    for (int64_t b = 0; b < blocks; ++b) body(b);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < blocks;) body(b);
  };
  std::mutex mutex;
  std::condition_variable done;
  int running = threads - 1;
  for (int t = 0; t < threads - 1; ++t)
    worker_pool().run([&] {
      work();
      std::lock_guard<std::mutex> lock(mutex);
      if (--running == 0) done.notify_one();
    });
  work();
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return running == 0; });
}

}  // namespace stratum::optim::detail
