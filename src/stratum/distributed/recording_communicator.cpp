#include "stratum/distributed/recording_communicator.h"

#include <chrono>

namespace stratum::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// Closes its entry once the operation is seen done; counts the time blocked.
class RecordedWork : public Work {
 public:
  RecordedWork(WorkPtr inner, std::shared_ptr<FlightRecorder> recorder, uint64_t id)
      : inner_(std::move(inner)), recorder_(std::move(recorder)), id_(id) {}

  void wait() override {
    const auto t0 = Clock::now();
    recorder_->waiting(id_);
    inner_->wait();
    finish(t0);
  }
  void synchronize() override {
    const auto t0 = Clock::now();
    recorder_->waiting(id_);
    inner_->synchronize();
    finish(t0);
  }
  // Holds nothing up: not counted as waiting.
  void wait_in_background() override {
    inner_->wait_in_background();
    recorder_->end(id_);
  }
  bool completed() override {
    if (!inner_->completed()) return false;
    recorder_->end(id_);
    return true;
  }

 private:
  void finish(Clock::time_point t0) {
    recorder_->add_wait(std::chrono::duration<double>(Clock::now() - t0).count());
    recorder_->end(id_);
  }

  WorkPtr inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  uint64_t id_;
};

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

}  // namespace

RecordingCommunicator::RecordingCommunicator(std::shared_ptr<Communicator> inner,
                                             std::shared_ptr<FlightRecorder> recorder)
    : Communicator(inner ? inner->rank() : 0, inner ? inner->global_ranks() : std::vector<int64_t>{},
                   inner ? inner->name() : "", inner ? inner->options() : CommOptions()),
      inner_(std::move(inner)), recorder_(std::move(recorder)) {
  if (!inner_ || !recorder_) throw Error("flight recorder: no communicator or no recorder");
  group_ = recorder_->add_group(name(), backend(), global_ranks());
}

template <class Issue>
WorkPtr RecordingCommunicator::record(CommOp op, int64_t bytes, P2PShape p2p, Issue&& call) {
  // The backend numbers every operation of the group (point-to-point too) as it issues it.
  const uint64_t seq = ++seq_;
  const uint64_t id = recorder_->begin(group_, seq, comm_op_name(op), bytes, p2p.peer, p2p.sends, p2p.receives);
  WorkPtr work;
  try {
    work = call();
  } catch (...) {
    // Refused before it was issued (bad arguments, identical on every rank): not an operation.
    recorder_->drop(id);
    --seq_;
    throw;
  }
  return std::make_shared<RecordedWork>(std::move(work), recorder_, id);
}

WorkPtr RecordingCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  return record(CommOp::all_reduce, bytes_of(tensor), P2PShape{}, [&] { return inner_->all_reduce(tensor, op); });
}

WorkPtr RecordingCommunicator::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  return record(CommOp::reduce_scatter, bytes_of(input), P2PShape{},
                [&] { return inner_->reduce_scatter(output, input, op); });
}

WorkPtr RecordingCommunicator::all_gather(at::Tensor& output, const at::Tensor& input) {
  return record(CommOp::all_gather, bytes_of(output), P2PShape{}, [&] { return inner_->all_gather(output, input); });
}

WorkPtr RecordingCommunicator::broadcast(at::Tensor& tensor, int root) {
  return record(CommOp::broadcast, bytes_of(tensor), P2PShape{}, [&] { return inner_->broadcast(tensor, root); });
}

WorkPtr RecordingCommunicator::send(const at::Tensor& tensor, int peer) {
  recorder_->count_p2p(group_, peer, true);
  return record(CommOp::send, bytes_of(tensor), P2PShape{peer, true, false},
                [&] { return inner_->send(tensor, peer); });
}

WorkPtr RecordingCommunicator::recv(at::Tensor& tensor, int peer) {
  recorder_->count_p2p(group_, peer, false);
  return record(CommOp::recv, bytes_of(tensor), P2PShape{peer, false, true},
                [&] { return inner_->recv(tensor, peer); });
}

WorkPtr RecordingCommunicator::batch_p2p(const std::vector<P2POp>& ops) {
  int64_t bytes = 0;
  P2PShape shape{ops.empty() ? -1 : ops.front().peer, false, false};
  for (const auto& op : ops) {
    bytes += bytes_of(op.tensor);
    if (op.peer != shape.peer) shape.peer = -1;  // several partners: none named
    (op.kind == P2POp::Kind::send ? shape.sends : shape.receives) = true;
    recorder_->count_p2p(group_, op.peer, op.kind == P2POp::Kind::send);
  }
  return record(p2p_kind(ops), bytes, shape, [&] { return inner_->batch_p2p(ops); });
}

WorkPtr RecordingCommunicator::barrier() {
  return record(CommOp::barrier, 0, P2PShape{}, [&] { return inner_->barrier(); });
}

std::shared_ptr<Communicator> RecordingCommunicator::split(const std::vector<std::vector<int64_t>>& groups,
                                                           const std::string& name) {
  return std::make_shared<RecordingCommunicator>(inner_->split(groups, name), recorder_);
}

std::shared_ptr<Communicator> with_flight_recorder(std::shared_ptr<Communicator> inner,
                                                   std::shared_ptr<FlightRecorder> recorder) {
  if (!recorder || !inner) return inner;
  return std::make_shared<RecordingCommunicator>(std::move(inner), std::move(recorder));
}

}  // namespace stratum::distributed
