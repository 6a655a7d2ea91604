#pragma once
// The flight recorder's communicator: a decorator that records every
// operation of the communicator it wraps (and of every group split from it)
// into the rank's FlightRecorder (flight_recorder.h) with the number the
// backend gives it on its group, so the entries match the backends' timeout
// reports ("all_reduce #12 on mpi group 'dp'"). An entry opens when the
// operation is issued and closes at the first wait()/synchronize()/completed()
// that sees it done; for NCCL, wait() only orders streams, so "closed" there
// means the caller's stream was ordered after it. Time blocked in wait() and
// synchronize() is added to the recorder's waited_seconds() (the straggler
// check). init() wraps the worlds, so every communicator of the job records.
#include <atomic>
#include <memory>

#include "stratum/distributed/communicator.h"
#include "stratum/distributed/flight_recorder.h"

namespace stratum::distributed {

class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<FlightRecorder> recorder);

  const char* backend() const override { return inner_->backend(); }
  const std::shared_ptr<Communicator>& inner() const { return inner_; }
  const std::shared_ptr<FlightRecorder>& recorder() const { return recorder_; }

  WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  WorkPtr all_gather(at::Tensor& output, const at::Tensor& input) override;
  WorkPtr broadcast(at::Tensor& tensor, int root) override;
  WorkPtr send(const at::Tensor& tensor, int peer) override;
  WorkPtr recv(at::Tensor& tensor, int peer) override;
  WorkPtr batch_p2p(const std::vector<P2POp>& ops) override;
  WorkPtr barrier() override;
  // Splits inner; the result records into the same recorder.
  std::shared_ptr<Communicator> split(const std::vector<std::vector<int64_t>>& groups,
                                      const std::string& name) override;

 private:
  // A point-to-point call's only partner (group rank; -1: none or several) and its directions.
  struct P2PShape {
    int peer = -1;
    bool sends = false, receives = false;
  };
  template <class Issue>
  WorkPtr record(CommOp op, int64_t bytes, P2PShape p2p, Issue&& call);

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  int group_ = -1;
  std::atomic<uint64_t> seq_{0};
};

// `inner` itself when `recorder` is null, else inner recorded into it.
std::shared_ptr<Communicator> with_flight_recorder(std::shared_ptr<Communicator> inner,
                                                   std::shared_ptr<FlightRecorder> recorder);

}  // namespace stratum::distributed
