#pragma once
// Runs one pipeline rank's actions of a Schedule (schedule.h): the computes
// through a StageOps that engine/ implements (the pipeline never sees the
// engine), the transfers as point-to-point operations on the pipeline group.
//
// Transfers: a receive is posted right before the compute that needs it and
// waited for; a send is posted right after the compute that produced it and
// left to complete while the rank computes on (waited for at the end of the
// step), which is the simulator's model (simulate.h), so a schedule it passes
// does not deadlock here. Activation shapes are agreed once per shape change,
// not per message: when the step's input shape differs from the last step's,
// the first activation over each link is preceded by a small shape message on
// the control group (CPU); gradients take the shape of the activation they
// answer.
//
// A wait that outlives the communicator's timeout ends the job naming the
// action, its micro-batch and chunk, the peer stage and the operation
// (distributed/wait_context.h): a peer that died or took another path never
// leaves this rank hanging.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "stratum/distributed/communicator.h"
#include "stratum/pipeline/schedule.h"

namespace stratum::pipeline {

class StageOps {
 public:
  virtual ~StageOps() = default;
  // Micro-batch `micro` through this rank's chunk `chunk`. `input`: the
  // previous virtual stage's activation (undefined on the first virtual
  // stage, which reads its inputs itself). Returns the activation for the next
  // virtual stage (ignored on the last, which computes the loss).
  virtual at::Tensor forward(int micro, int chunk, const at::Tensor& input) = 0;
  // Its backward: `output_grad` from the next virtual stage (undefined on the
  // last, which starts from its loss). `input_only`: ZB-H1's B (the weight
  // gradients deferred to backward_weight). Returns the gradient of the
  // chunk's input (undefined on the first virtual stage).
  virtual at::Tensor backward(int micro, int chunk, const at::Tensor& output_grad, bool input_only) = 0;
  // ZB-H1's W: the weight gradients backward(input_only) deferred.
  virtual void backward_weight(int micro, int chunk) = 0;
  // The tied parameters' gradients summed over the stages that hold them.
  virtual void reduce_tied() = 0;
  virtual void optimizer_step() = 0;
};

// Seconds spent in each part of the last step, on this rank.
struct StepTiming {
  double forward = 0, backward = 0, backward_input = 0, backward_weight = 0;
  double step = 0;   // reduce_tied and optimizer_step
  double total = 0;  // the whole run()
  double compute() const { return forward + backward + backward_input + backward_weight; }
  // The share of the step this rank spent neither computing nor stepping: the
  // measured bubble (waiting on peers, and the transfers' own cost).
  double bubble() const { return total > 0 ? (total - compute() - step) / total : 0; }
};

class ScheduleExecutor {
 public:
  // `pp`: the pipeline group, rank r = pipeline stage r, for tensors on
  // `device` (the activations'); `control`: the same ranks on the CPU (MPI),
  // for shape messages.
  ScheduleExecutor(Schedule schedule, std::shared_ptr<distributed::Communicator> pp,
                   std::shared_ptr<distributed::Communicator> control, c10::Device device);

  // One step: this rank's actions in order. `shapes_changed`: the step's
  // inputs differ in shape from the last step's (always true for the first).
  // Every rank of the group must pass the same value.
  void run(StageOps& ops, bool shapes_changed);

  const Schedule& schedule() const { return schedule_; }
  int rank() const { return rank_; }
  const StepTiming& last_timing() const { return timing_; }

 private:
  struct Shape {
    std::vector<int64_t> sizes;
    at::ScalarType dtype = at::kFloat;
    bool known = false;
  };
  void send_shape(const at::Tensor& t, int peer, const Action& a);
  Shape recv_shape(int peer, const Action& a);
  // Waits for `work` (the transfer of action `a`); a timeout names `a`.
  void wait(distributed::Work& work, const Action& a);
  std::string describe(const Action& a) const;

  Schedule schedule_;
  std::shared_ptr<distributed::Communicator> pp_, control_;
  c10::Device device_;
  int rank_;
  // By chunk: the shape of the activation received from the previous virtual
  // stage, and of the one sent to the next (that of the gradient coming back).
  std::vector<Shape> recv_shapes_, sent_shapes_;
  StepTiming timing_;
};

}  // namespace stratum::pipeline
