#include "stratum/pipeline/executor.h"

#include <ATen/ATen.h>

#include <chrono>
#include <map>

#include "stratum/core/error.h"
#include "stratum/distributed/wait_context.h"

namespace stratum::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxDims = 8;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

using Key = std::pair<int, int>;  // (micro, chunk)

at::Tensor take(std::map<Key, at::Tensor>& m, const Action& a) {
  auto it = m.find({a.micro, a.chunk});
  if (it == m.end()) return at::Tensor();
  at::Tensor t = std::move(it->second);
  m.erase(it);
  return t;
}

}  // namespace

ScheduleExecutor::ScheduleExecutor(Schedule schedule, std::shared_ptr<distributed::Communicator> pp,
                                   std::shared_ptr<distributed::Communicator> control, c10::Device device)
    : schedule_(std::move(schedule)), pp_(std::move(pp)), control_(std::move(control)), device_(device) {
  if (!pp_ || !control_) throw Error("pipeline executor: needs the pipeline group and its CPU control group");
  if (pp_->size() != schedule_.stages || control_->size() != schedule_.stages)
    throw Error("pipeline executor: the schedule has " + std::to_string(schedule_.stages) +
                " stages but the pipeline group has " + std::to_string(pp_->size()) + " ranks (control group " +
                std::to_string(control_->size()) + ")");
  rank_ = pp_->rank();
  if (control_->rank() != rank_)
    throw Error("pipeline executor: pipeline rank " + std::to_string(rank_) + " is rank " +
                std::to_string(control_->rank()) + " of the control group; both must order the stages alike");
  recv_shapes_.resize(schedule_.virtual_stages);
  sent_shapes_.resize(schedule_.virtual_stages);
}

std::string ScheduleExecutor::describe(const Action& a) const {
  std::string s = "pipeline stage " + std::to_string(rank_) + ": " + op_name(a.op) + " of micro-batch " +
                  std::to_string(a.micro);
  if (schedule_.virtual_stages > 1) s += " (chunk " + std::to_string(a.chunk) + ")";
  if (a.peer >= 0) s += (a.op == Op::send_act || a.op == Op::send_grad ? " to" : " from") +
                        std::string(" stage ") + std::to_string(a.peer);
  return s;
}

void ScheduleExecutor::wait(distributed::Work& work, const Action& a) {
  distributed::WaitContext context(describe(a));
  work.wait();
}

void ScheduleExecutor::send_shape(const at::Tensor& t, int peer, const Action& a) {
  if (t.dim() > kMaxDims)
    throw Error(describe(a) + ": activations of " + std::to_string(t.dim()) + " dimensions; at most " +
                std::to_string(kMaxDims) + " cross a stage boundary");
  at::Tensor header = at::zeros({kMaxDims + 2}, at::kLong);
  int64_t* h = header.data_ptr<int64_t>();
  h[0] = t.dim();
  h[1] = static_cast<int64_t>(t.scalar_type());
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  auto w = control_->send(header, peer);
  wait(*w, a);
}

ScheduleExecutor::Shape ScheduleExecutor::recv_shape(int peer, const Action& a) {
  at::Tensor header = at::zeros({kMaxDims + 2}, at::kLong);
  auto w = control_->recv(header, peer);
  wait(*w, a);
  const int64_t* h = header.data_ptr<int64_t>();
  if (h[0] < 0 || h[0] > kMaxDims) throw Error(describe(a) + ": a malformed shape message from the peer stage");
  Shape s;
  s.sizes.assign(h + 2, h + 2 + h[0]);
  s.dtype = static_cast<at::ScalarType>(h[1]);
  s.known = true;
  return s;
}

void ScheduleExecutor::run(StageOps& ops, bool shapes_changed) {
  const auto step_start = Clock::now();
  timing_ = StepTiming{};
  const int v = schedule_.virtual_stages;
  const int last_vs = schedule_.num_virtual_stages() - 1;
  std::vector<bool> announce(v, shapes_changed);  // send a shape message before the chunk's next activation
  if (shapes_changed)
    for (auto& s : recv_shapes_) s.known = false;
  std::map<Key, at::Tensor> received_act, received_grad, act_out, grad_out;
  std::vector<std::pair<distributed::WorkPtr, Action>> sends;
  auto finish_sends = [&] {
    for (auto& [w, a] : sends) wait(*w, a);
    sends.clear();
  };
  for (const Action& a : schedule_.ranks.at(rank_)) {
    const int vs = schedule_.virtual_stage(rank_, a.chunk);
    const auto t = Clock::now();
    switch (a.op) {
      case Op::recv_act: {
        Shape& shape = recv_shapes_.at(a.chunk);
        if (!shape.known) shape = recv_shape(a.peer, a);
        at::Tensor buf = at::empty(shape.sizes, at::TensorOptions().dtype(shape.dtype).device(device_));
        auto w = pp_->recv(buf, a.peer);
        wait(*w, a);
        received_act[{a.micro, a.chunk}] = buf;
        break;
      }
      case Op::forward: {
        at::Tensor out = ops.forward(a.micro, a.chunk, take(received_act, a));
        if (vs < last_vs) act_out[{a.micro, a.chunk}] = std::move(out);
        timing_.forward += seconds_since(t);
        break;
      }
      case Op::send_act: {
        at::Tensor out = take(act_out, a);
        if (!out.defined()) throw Error(describe(a) + ": the forward returned no activation to send");
        out = out.detach().contiguous();
        if (announce.at(a.chunk)) {
          send_shape(out, a.peer, a);
          announce[a.chunk] = false;
        }
        Shape& sent = sent_shapes_.at(a.chunk);
        sent.sizes = out.sizes().vec();
        sent.dtype = out.scalar_type();
        sent.known = true;
        sends.emplace_back(pp_->send(out, a.peer), a);
        break;
      }
      case Op::recv_grad: {
        const Shape& shape = sent_shapes_.at(a.chunk);
        if (!shape.known) throw Error(describe(a) + ": a gradient for an activation this stage never sent");
        at::Tensor buf = at::empty(shape.sizes, at::TensorOptions().dtype(shape.dtype).device(device_));
        auto w = pp_->recv(buf, a.peer);
        wait(*w, a);
        received_grad[{a.micro, a.chunk}] = buf;
        break;
      }
      case Op::backward:
      case Op::backward_input: {
        const bool input_only = a.op == Op::backward_input;
        at::Tensor g = ops.backward(a.micro, a.chunk, take(received_grad, a), input_only);
        if (vs > 0) grad_out[{a.micro, a.chunk}] = std::move(g);
        (input_only ? timing_.backward_input : timing_.backward) += seconds_since(t);
        break;
      }
      case Op::backward_weight:
        ops.backward_weight(a.micro, a.chunk);
        timing_.backward_weight += seconds_since(t);
        break;
      case Op::send_grad: {
        at::Tensor g = take(grad_out, a);
        if (!g.defined())
          throw Error(describe(a) + ": the backward produced no gradient for the stage's input (does the "
                      "activation it received reach the loss?)");
        sends.emplace_back(pp_->send(g.contiguous(), a.peer), a);
        break;
      }
      case Op::reduce_tied:
        finish_sends();
        ops.reduce_tied();
        timing_.step += seconds_since(t);
        break;
      case Op::optimizer_step:
        finish_sends();
        ops.optimizer_step();
        timing_.step += seconds_since(t);
        break;
    }
  }
  finish_sends();
  if (!received_act.empty() || !received_grad.empty() || !act_out.empty() || !grad_out.empty())
    throw Error("pipeline stage " + std::to_string(rank_) + ": the schedule left transfers unused (" +
                std::to_string(received_act.size() + received_grad.size() + act_out.size() + grad_out.size()) +
                "); it does not pair its computes with their transfers");
  timing_.total = seconds_since(step_start);
}

}  // namespace stratum::pipeline
