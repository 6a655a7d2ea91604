#pragma once
// What the calling thread is waiting for, in its caller's words: while a
// WaitContext is alive, a Work::wait() on this thread that times out names it
// ahead of the operation ("pipeline stage 0: recv_grad of micro-batch 3 from
// stage 1: recv #12 (...) on mpi group 'pp' ... timed out"), so the error says
// which step of an algorithm stalled, not only which call. Scopes nest; the
// innermost names the wait. (The NCCL watchdog runs on its own thread: its
// reports name the operation only.)
#include <string>

namespace stratum::distributed {

class WaitContext {
 public:
  explicit WaitContext(std::string what);
  ~WaitContext();
  WaitContext(const WaitContext&) = delete;
  WaitContext& operator=(const WaitContext&) = delete;
  // "<what>: " of the innermost scope on this thread, or "".
  static std::string prefix();

 private:
  std::string what_;
  const WaitContext* outer_;
};

}  // namespace stratum::distributed
