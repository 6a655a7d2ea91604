#pragma once
// The comms logger (ds_config `comms_logger`) as a decorator over any
// Communicator: what it forwards is unchanged; what it adds is
//  - profiling (`enabled` with `prof_all` or `prof_ops`): the latency from
//    issue to completion of each profiled op, recorded once into a CommsLog
//    (`verbose`: one log line per op, on every rank: latencies differ by rank
//    and a group need not contain rank 0). To time it, as DeepSpeed does, a
//    profiled op on a GPU first waits for the device's queued work, and its
//    Work's wait() blocks the host until the op has finished (synchronize()):
//    profiled NCCL ops no longer overlap compute. Latency runs to the first
//    wait()/synchronize()/completed() that sees the op done, so it includes
//    whatever the caller did between issue and wait (wait promptly);
//  - the desync detector (`debug`): before every collective (not
//    point-to-point) the ranks exchange a fingerprint of the call over a CPU
//    `control` communicator and end the job naming the first mismatch, rank by
//    rank (desync_check.h). That exchange is a blocking all-gather per
//    collective: a debugging tool, not for production runs.
#include <array>
#include <memory>

#include "stratum/config/sections.h"
#include "stratum/distributed/comms_logger.h"
#include "stratum/distributed/desync_check.h"

namespace stratum::distributed {

class LoggedCommunicator : public Communicator {
 public:
  // `control`: a CPU communicator with inner's members in inner's order, used by
  // this logger alone (with_comms_logger makes one); may be null unless debug.
  LoggedCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<Communicator> control,
                     const config::CommsLoggerConfig& config, std::shared_ptr<CommsLog> log,
                     DesyncAction on_desync = DesyncAction::abort_job);

  const char* backend() const override { return inner_->backend(); }
  const std::shared_ptr<Communicator>& inner() const { return inner_; }
  const std::shared_ptr<CommsLog>& comms_log() const { return log_; }
  bool profiles(CommOp op) const { return profiled_[static_cast<size_t>(op)]; }

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  WorkPtr all_gather(at::Tensor& output, const at::Tensor& input) override;
  WorkPtr broadcast(at::Tensor& tensor, int root) override;
  WorkPtr send(const at::Tensor& tensor, int peer) override;
  WorkPtr recv(at::Tensor& tensor, int peer) override;
  WorkPtr batch_p2p(const std::vector<P2POp>& ops) override;
  WorkPtr barrier() override;
  // Splits inner and control alike; the result logs into the same CommsLog.
  std::shared_ptr<Communicator> split(const std::vector<std::vector<int64_t>>& groups,
                                      const std::string& name) override;

 private:
  // Debug mode: exchange `call` with the group and stop on a mismatch.
  void check_in_sync(CollectiveFingerprint call);
  [[noreturn]] void fail(const std::string& message, int exit_code, bool timeout) const;
  template <class Issue>
  WorkPtr issue(CommOp op, int64_t bytes, const at::Tensor& operand, Issue&& call);

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<Communicator> control_;
  config::CommsLoggerConfig config_;
  std::shared_ptr<CommsLog> log_;
  DesyncAction on_desync_;
  std::array<bool, 8> profiled_{};  // by CommOp
  int64_t collectives_ = 0;         // issued on this group, for the desync check
};

// `inner` itself when `config` has neither `enabled` nor `debug`; else a
// LoggedCommunicator recording into `log` (created when null). Collective over
// `inner` when debug is on: it gives the logger a private copy of `control`
// (for an MPI inner, control may be inner itself; for NCCL, the CPU
// communicator of the same ranks). Unknown `prof_ops` names throw stratum::Error;
// DeepSpeed's spellings (all_gather_into_tensor, reduce_scatter_tensor,
// all_reduce_coalesced, isend, irecv) are accepted.
std::shared_ptr<Communicator> with_comms_logger(std::shared_ptr<Communicator> inner,
                                                std::shared_ptr<Communicator> control,
                                                const config::CommsLoggerConfig& config,
                                                std::shared_ptr<CommsLog> log = nullptr,
                                                DesyncAction on_desync = DesyncAction::abort_job);

}  // namespace stratum::distributed
