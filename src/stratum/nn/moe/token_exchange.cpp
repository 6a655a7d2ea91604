#include "stratum/nn/moe/token_exchange.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <numeric>
#include <string>

#include "stratum/core/error.h"
#include "stratum/distributed/wait_context.h"

namespace stratum::nn::moe {
namespace {

using distributed::Communicator;
using distributed::P2POp;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

at::Tensor exchange(const at::Tensor& x_any, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                    Communicator& group, const char* what) {
  const at::Tensor x = x_any.contiguous();
  const int64_t me = group.rank(), width = x.size(1);
  at::Tensor out = at::empty({sum(recv), width}, x.options());
  std::vector<P2POp> ops;
  int64_t send_at = 0, recv_at = 0;
  for (int64_t p = 0; p < group.size(); ++p) {
    const size_t i = static_cast<size_t>(p);
    if (p == me) {
      if (send[i] != recv[i])
        throw Error(std::string("MoE token exchange: rank ") + std::to_string(me) + " sends itself " +
                    std::to_string(send[i]) + " rows but expects " + std::to_string(recv[i]));
      if (send[i] > 0) out.narrow(0, recv_at, recv[i]).copy_(x.narrow(0, send_at, send[i]));
    } else {
      if (send[i] > 0) ops.push_back({P2POp::Kind::send, x.narrow(0, send_at, send[i]), static_cast<int>(p)});
      if (recv[i] > 0) ops.push_back({P2POp::Kind::recv, out.narrow(0, recv_at, recv[i]), static_cast<int>(p)});
    }
    send_at += send[i];
    recv_at += recv[i];
  }
  if (!ops.empty()) {
    distributed::WaitContext waiting(what);
    group.batch_p2p(ops)->wait();
  }
  return out;
}

struct ExchangeRows : torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> send,
                            std::vector<int64_t> recv, int64_t group_address) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["group"] = group_address;
    Communicator& group = *reinterpret_cast<Communicator*>(static_cast<intptr_t>(group_address));
    return exchange(x, send, recv, group, "MoE: tokens to their experts' ranks");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& group = *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
    // Back the way they came: what was received is sent.
    return {exchange(grads[0], ctx->saved_data["recv"].toIntVector(), ctx->saved_data["send"].toIntVector(), group,
                     "MoE: gradients back to their tokens' ranks"),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor exchange_rows(const at::Tensor& x, const std::vector<int64_t>& send_splits,
                         const std::vector<int64_t>& recv_splits, const ExpertParallel& ep) {
  const size_t n = static_cast<size_t>(ep.size());
  if (send_splits.size() != n || recv_splits.size() != n)
    throw Error("exchange_rows: " + std::to_string(send_splits.size()) + " send and " +
                std::to_string(recv_splits.size()) + " receive sizes for a group of " + std::to_string(n));
  if (x.dim() != 2 || sum(send_splits) != x.size(0))
    throw Error("exchange_rows: the send sizes sum to " + std::to_string(sum(send_splits)) + ", x is " +
                c10::str(x.sizes()));
  if (!ep.enabled()) return x;
  // The group outlives the graph: the model holds it.
  return ExchangeRows::apply(x, send_splits, recv_splits,
                             static_cast<int64_t>(reinterpret_cast<intptr_t>(ep.group.get())));
}

at::Tensor gather_counts(const at::Tensor& counts, const ExpertParallel& ep) { return gather_counts(counts, ep.group); }

at::Tensor gather_counts(const at::Tensor& counts, const std::shared_ptr<Communicator>& group) {
  if (!group || group->size() == 1) return counts.to(at::kCPU, at::kLong).unsqueeze(0);
  at::Tensor mine = counts.to(at::kLong).contiguous();
  at::Tensor all = at::empty({group->size() * mine.numel()}, mine.options());
  {
    distributed::WaitContext waiting("MoE: every rank's tokens per expert");
    group->all_gather(all, mine)->wait();
  }
  return all.view({group->size(), mine.numel()}).cpu();
}

}  // namespace stratum::nn::moe
