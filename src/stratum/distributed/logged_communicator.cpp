#include "stratum/distributed/logged_communicator.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>
#include <thread>

#include "stratum/core/log.h"
#include "stratum/distributed/init.h"

namespace stratum::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// A profiled op's Work: the first wait()/synchronize() (or a completed() that
// says yes) records the latency since issue.
class TimedWork : public Work {
 public:
  TimedWork(WorkPtr inner, Clock::time_point start, CommOp op, int64_t bytes, int group_size,
            std::shared_ptr<CommsLog> log, bool verbose)
      : inner_(std::move(inner)), start_(start), op_(op), bytes_(bytes), group_size_(group_size),
        log_(std::move(log)), verbose_(verbose) {}

  void wait() override {
    // synchronize() so that the time is the device's, not the stream order's;
    // wait() then gives the caller the ordering it asked for.
    inner_->synchronize();
    record();
    inner_->wait();
  }
  void synchronize() override {
    inner_->synchronize();
    record();
  }
  // Stream order only: the host does not wait, so there is no latency to record.
  void wait_in_background() override { inner_->wait_in_background(); }
  bool completed() override {
    if (!inner_->completed()) return false;
    record();
    return true;
  }

 private:
  void record() {
    if (recorded_) return;
    recorded_ = true;
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    log_->record(op_, bytes_, seconds, group_size_);
    if (verbose_) log::info(format_comm_op_line(op_, bytes_, seconds, group_size_));
  }

  WorkPtr inner_;
  Clock::time_point start_;
  CommOp op_;
  int64_t bytes_;
  int group_size_;
  std::shared_ptr<CommsLog> log_;
  bool verbose_;
  bool recorded_ = false;
};

// ds_config names: ours, plus DeepSpeed's spellings of the same operations.
bool parse_op_name(const std::string& name, CommOp& op) {
  static const std::pair<const char*, CommOp> kAliases[] = {
      {"all_gather_into_tensor", CommOp::all_gather}, {"reduce_scatter_tensor", CommOp::reduce_scatter},
      {"all_reduce_coalesced", CommOp::all_reduce},   {"isend", CommOp::send},
      {"irecv", CommOp::recv},
  };
  for (int i = 0; i <= static_cast<int>(CommOp::barrier); ++i)
    if (name == comm_op_name(static_cast<CommOp>(i))) {
      op = static_cast<CommOp>(i);
      return true;
    }
  for (const auto& [alias, target] : kAliases)
    if (name == alias) {
      op = target;
      return true;
    }
  return false;
}

// Waits for the work already queued on a GPU, so that a profiled op's latency
// starts when the op can start, not behind the caller's pending kernels
// (DeepSpeed gets the same from a start event on the stream).
void drain_device(const at::Tensor& t) {
  if (t.defined() && t.device().is_cuda())
    c10::impl::getDeviceGuardImpl(t.device().type())->synchronizeDevice(t.device().index());
}

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }
int64_t dtype_of(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1; }

}  // namespace

LoggedCommunicator::LoggedCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<Communicator> control,
                                       const config::CommsLoggerConfig& config, std::shared_ptr<CommsLog> log,
                                       DesyncAction on_desync)
    : Communicator(inner ? inner->rank() : 0, inner ? inner->global_ranks() : std::vector<int64_t>{},
                   inner ? inner->name() : "", inner ? inner->options() : CommOptions()),
      inner_(std::move(inner)), control_(std::move(control)), config_(config),
      log_(log ? std::move(log) : std::make_shared<CommsLog>()), on_desync_(on_desync) {
  if (!inner_) throw Error("comms logger: no communicator to log");
  if (config_.debug) {
    if (!control_)
      throw Error("comms logger on group '" + name() + "': debug mode needs a CPU control communicator");
    if (control_->global_ranks() != global_ranks() || control_->rank() != rank())
      throw Error("comms logger on group '" + name() + "': control communicator '" + control_->name() +
                  "' has other members than the group it checks");
  }
  if (!config_.enabled) return;
  for (const std::string& name : config_.prof_ops) {
    CommOp op;
    if (!parse_op_name(name, op))
      throw Error("comms_logger.prof_ops: unknown operation '" + name +
                  "'; expected all_reduce, reduce_scatter, all_gather, broadcast, send, recv, batch_p2p or barrier");
    profiled_[static_cast<size_t>(op)] = true;
  }
  if (config_.prof_all) profiled_.fill(true);
}

template <class Issue>
WorkPtr LoggedCommunicator::issue(CommOp op, int64_t bytes, const at::Tensor& operand, Issue&& call) {
  if (!profiles(op)) return call();
  drain_device(operand);
  const auto start = Clock::now();
  WorkPtr work = call();
  return std::make_shared<TimedWork>(std::move(work), start, op, bytes, size(), log_, config_.verbose);
}

void LoggedCommunicator::fail(const std::string& message, int exit_code, bool timeout) const {
  if (timeout) {
    if (control_->options().abort_on_timeout) abort_job(message, exit_code);
    throw CommTimeout(message);
  }
  if (on_desync_ == DesyncAction::abort_job) abort_job(message, exit_code);
  throw CommDesync(message);
}

void LoggedCommunicator::check_in_sync(CollectiveFingerprint call) {
  if (!config_.debug) return;
  call.seq = ++collectives_;
  const int n = size();
  at::Tensor mine = at::empty({CollectiveFingerprint::kWords}, at::kLong);
  at::Tensor all = at::empty({CollectiveFingerprint::kWords * n}, at::kLong);
  const auto words = call.pack();
  std::copy(words.begin(), words.end(), mine.data_ptr<int64_t>());
  WorkPtr exchange = control_->all_gather(all, mine);
  // Polled here rather than wait()ed so that a rank that never arrives is
  // reported as the collective it skipped, not as the control all-gather.
  const auto deadline = Clock::now() + control_->options().timeout;
  for (int spins = 0; !exchange->completed(); ++spins) {
    if (Clock::now() > deadline) {
      const double seconds = std::chrono::duration<double>(control_->options().timeout).count();
      fail("desync check on group '" + name() + "': not every rank reached collective #" +
               std::to_string(call.seq) + " (this rank: " + call.call() + ") within " +
               std::to_string(seconds).substr(0, 5) + " s; a rank crashed, hangs, or issued fewer collectives",
           kExitCommTimeout, true);
    }
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else std::this_thread::yield();
  }
  exchange->wait();
  std::vector<CollectiveFingerprint> by_rank;
  const int64_t* p = all.data_ptr<int64_t>();
  for (int r = 0; r < n; ++r) by_rank.push_back(CollectiveFingerprint::unpack(p + r * CollectiveFingerprint::kWords));
  const std::string report = find_desync(by_rank, name(), global_ranks());
  if (!report.empty()) fail(report, kExitDesync, false);
}

WorkPtr LoggedCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_in_sync({CommOp::all_reduce, bytes_of(tensor), dtype_of(tensor), static_cast<int64_t>(op), -1, 0});
  return issue(CommOp::all_reduce, bytes_of(tensor), tensor, [&] { return inner_->all_reduce(tensor, op); });
}

WorkPtr LoggedCommunicator::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  check_in_sync({CommOp::reduce_scatter, bytes_of(input), dtype_of(input), static_cast<int64_t>(op), -1, 0});
  return issue(CommOp::reduce_scatter, bytes_of(input), input,
               [&] { return inner_->reduce_scatter(output, input, op); });
}

WorkPtr LoggedCommunicator::all_gather(at::Tensor& output, const at::Tensor& input) {
  check_in_sync({CommOp::all_gather, bytes_of(output), dtype_of(input), -1, -1, 0});
  return issue(CommOp::all_gather, bytes_of(output), input, [&] { return inner_->all_gather(output, input); });
}

WorkPtr LoggedCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_in_sync({CommOp::broadcast, bytes_of(tensor), dtype_of(tensor), -1, root, 0});
  return issue(CommOp::broadcast, bytes_of(tensor), tensor, [&] { return inner_->broadcast(tensor, root); });
}

WorkPtr LoggedCommunicator::barrier() {
  check_in_sync({CommOp::barrier, 0, -1, -1, -1, 0});
  return issue(CommOp::barrier, 0, at::Tensor(), [&] { return inner_->barrier(); });
}

// Point-to-point involves two ranks of the group, not all: no desync check.
WorkPtr LoggedCommunicator::send(const at::Tensor& tensor, int peer) {
  return issue(CommOp::send, bytes_of(tensor), tensor, [&] { return inner_->send(tensor, peer); });
}

WorkPtr LoggedCommunicator::recv(at::Tensor& tensor, int peer) {
  return issue(CommOp::recv, bytes_of(tensor), tensor, [&] { return inner_->recv(tensor, peer); });
}

WorkPtr LoggedCommunicator::batch_p2p(const std::vector<P2POp>& ops) {
  // Logged under the name the backends give it: one op is a plain send or recv.
  const CommOp kind = p2p_kind(ops);
  int64_t bytes = 0;
  for (const auto& op : ops) bytes += bytes_of(op.tensor);
  return issue(kind, bytes, ops.empty() ? at::Tensor() : ops[0].tensor, [&] { return inner_->batch_p2p(ops); });
}

std::shared_ptr<Communicator> LoggedCommunicator::split(const std::vector<std::vector<int64_t>>& groups,
                                                        const std::string& name) {
  auto inner = inner_->split(groups, name);
  // The control's own split is private to the new logger as this one's is to us.
  auto control = config_.debug ? control_->split(groups, name + ".desync") : nullptr;
  return std::make_shared<LoggedCommunicator>(std::move(inner), std::move(control), config_, log_, on_desync_);
}

std::shared_ptr<Communicator> with_comms_logger(std::shared_ptr<Communicator> inner,
                                                std::shared_ptr<Communicator> control,
                                                const config::CommsLoggerConfig& config, std::shared_ptr<CommsLog> log,
                                                DesyncAction on_desync) {
  if (!config.enabled && !config.debug) return inner;
  if (config.debug && control && inner) {
    if (control->global_ranks() != inner->global_ranks())
      throw Error("comms logger on group '" + inner->name() + "': control communicator '" + control->name() +
                  "' has other members than the group it checks");
    // A private duplicate: the fingerprint exchange never pairs with the
    // caller's own traffic on `control`.
    std::vector<int64_t> everyone(control->size());
    for (int r = 0; r < control->size(); ++r) everyone[r] = r;
    control = control->split({everyone}, inner->name() + ".desync");
  }
  return std::make_shared<LoggedCommunicator>(std::move(inner), std::move(control), config, std::move(log),
                                              on_desync);
}

}  // namespace stratum::distributed
