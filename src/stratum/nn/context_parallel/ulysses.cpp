#include "stratum/nn/context_parallel/ulysses.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "stratum/core/error.h"
#include "stratum/distributed/wait_context.h"

namespace stratum::nn::cp {
namespace {

using distributed::Communicator;
using distributed::P2POp;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Peer p's share of each send buffer [size, ...] goes to p; recv[p] comes from p.
void exchange(const std::vector<at::Tensor>& send, const std::vector<at::Tensor>& recv, Communicator& group,
              const char* what) {
  const int64_t me = group.rank();
  std::vector<P2POp> ops;
  for (size_t t = 0; t < send.size(); ++t)
    for (int64_t p = 0; p < group.size(); ++p) {
      if (p == me) {
        recv[t][p].copy_(send[t][p]);
        continue;
      }
      ops.push_back({P2POp::Kind::send, send[t][p], static_cast<int>(p)});
      ops.push_back({P2POp::Kind::recv, recv[t][p], static_cast<int>(p)});
    }
  if (ops.empty()) return;
  distributed::WaitContext waiting(what);
  group.batch_p2p(ops)->wait();
}

std::vector<at::Tensor> to_heads(const std::vector<at::Tensor>& xs, Communicator& group) {
  const int64_t u = group.size();
  std::vector<at::Tensor> send, recv;
  for (const at::Tensor& x : xs) {
    const int64_t b = x.size(0), h = x.size(1) / u, t = x.size(2), d = x.size(3);
    send.push_back(x.reshape({b, u, h, t, d}).transpose(0, 1).contiguous());  // [peer, B, h, T, D]
    recv.push_back(at::empty({u, b, h, t, d}, x.options()));
  }
  exchange(send, recv, group, "Ulysses: the sequence traded for heads");
  std::vector<at::Tensor> out;
  for (const at::Tensor& r : recv)
    out.push_back(r.permute({1, 2, 0, 3, 4}).reshape({r.size(1), r.size(2), u * r.size(3), r.size(4)}));
  return out;
}

std::vector<at::Tensor> to_sequence(const std::vector<at::Tensor>& ys, Communicator& group) {
  const int64_t u = group.size();
  std::vector<at::Tensor> send, recv;
  for (const at::Tensor& y : ys) {
    const int64_t b = y.size(0), h = y.size(1), t = y.size(2) / u, d = y.size(3);
    send.push_back(y.reshape({b, h, u, t, d}).permute({2, 0, 1, 3, 4}).contiguous());  // [peer, B, h, T, D]
    recv.push_back(at::empty({u, b, h, t, d}, y.options()));
  }
  exchange(send, recv, group, "Ulysses: heads traded back for the sequence");
  std::vector<at::Tensor> out;
  for (const at::Tensor& r : recv)
    out.push_back(r.transpose(0, 1).reshape({r.size(1), u * r.size(2), r.size(3), r.size(4)}));
  return out;
}

Communicator& group_at(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

// Undefined gradients (an output nothing read) as zeros of the output's size.
std::vector<at::Tensor> defined_or_zero(const variable_list& grads, AutogradContext* ctx) {
  at::TensorOptions options;
  for (const at::Tensor& g : grads)
    if (g.defined()) options = g.options();
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < grads.size(); ++i)
    out.push_back(grads[i].defined() ? grads[i]
                                     : at::zeros(ctx->saved_data["size" + std::to_string(i)].toIntVector(), options));
  return out;
}

struct SequenceToHeads : torch::autograd::Function<SequenceToHeads> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               int64_t group_address) {
    ctx->saved_data["group"] = group_address;
    std::vector<at::Tensor> out = to_heads({q, k, v}, group_at(ctx));
    for (size_t i = 0; i < out.size(); ++i) ctx->saved_data["size" + std::to_string(i)] = out[i].sizes().vec();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    std::vector<at::Tensor> back = to_sequence(defined_or_zero(grads, ctx), group_at(ctx));
    back.push_back(at::Tensor());
    return back;
  }
};

struct HeadsToSequence : torch::autograd::Function<HeadsToSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, int64_t group_address) {
    ctx->saved_data["group"] = group_address;
    return to_sequence({y}, group_at(ctx))[0];
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {to_heads({grads[0]}, group_at(ctx))[0], at::Tensor()};
  }
};

int64_t address(const std::shared_ptr<Communicator>& group) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(group.get()));
}

}  // namespace

std::vector<at::Tensor> sequence_to_heads(const std::vector<at::Tensor>& xs, const std::shared_ptr<Communicator>& group) {
  if (!group || group->size() == 1) return xs;
  if (xs.size() != 3) throw Error("Ulysses: sequence_to_heads takes q, k and v");
  for (const at::Tensor& x : xs)
    if (x.dim() != 4 || x.size(1) % group->size() != 0)
      throw Error("Ulysses: " + std::to_string(x.dim() == 4 ? x.size(1) : 0) + " heads do not split over " +
                  std::to_string(group->size()) + " ranks");
  // The group outlives the graph: the model's engine holds it.
  return SequenceToHeads::apply(xs[0], xs[1], xs[2], address(group));
}

at::Tensor heads_to_sequence(const at::Tensor& y, const std::shared_ptr<Communicator>& group) {
  if (!group || group->size() == 1) return y;
  if (y.dim() != 4 || y.size(2) % group->size() != 0)
    throw Error("Ulysses: heads_to_sequence takes [B, H, size x T, D], not " + c10::str(y.sizes()));
  return HeadsToSequence::apply(y, address(group));
}

}  // namespace stratum::nn::cp
