#include "stratum/distributed/communicator.h"

#include <c10/core/ScalarType.h>

#include <cstdio>
#include <cstdlib>

#include "stratum/core/binary_bytes.h"

namespace stratum::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::batch_p2p: return "batch_p2p";
    case CommOp::barrier: return "barrier";
  }
  return "?";
}

CommOptions CommOptions::from_env() {
  CommOptions o;
  if (const char* v = std::getenv("STRATUM_COMM_TIMEOUT")) {
    char* end = nullptr;
    double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds > 0))
      throw Error("STRATUM_COMM_TIMEOUT='" + std::string(v) + "': expected a positive number of seconds");
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
  }
  return o;
}

std::string format_bytes(int64_t bytes) { return binary_bytes_text(bytes); }

std::string Communicator::describe(CommOp op, uint64_t seq, int64_t bytes, const std::string& dtype) const {
  std::string ranks;
  for (size_t i = 0; i < global_ranks_.size(); ++i) ranks += (i ? ", " : "") + std::to_string(global_ranks_[i]);
  return std::string(comm_op_name(op)) + " #" + std::to_string(seq) + " (" + format_bytes(bytes) +
         (dtype.empty() ? "" : " " + dtype) + ") on " + backend() + " group '" + name_ + "' [ranks " + ranks + "]";
}

void check_collective_args(CommOp op, const Communicator& comm, const at::Tensor& a, const at::Tensor* b) {
  const std::string where = std::string(comm_op_name(op)) + " on group '" + comm.name() + "': ";
  auto check_one = [&](const at::Tensor& t, const char* role) {
    if (!t.defined()) throw Error(where + role + " tensor is undefined");
    if (!t.is_contiguous()) throw Error(where + role + " tensor must be contiguous");
  };
  check_one(a, "the");
  if (!b) return;
  check_one(*b, "the second");
  if (a.scalar_type() != b->scalar_type())
    throw Error(where + "output dtype " + std::string(c10::toString(a.scalar_type())) + " != input dtype " +
                c10::toString(b->scalar_type()));
  if (a.device() != b->device()) throw Error(where + "output and input are on different devices");
  const int64_t n = comm.size();
  if (op == CommOp::reduce_scatter && b->numel() != a.numel() * n)
    throw Error(where + "input has " + std::to_string(b->numel()) + " elements, expected output " +
                std::to_string(a.numel()) + " x group size " + std::to_string(n) + " = " + std::to_string(a.numel() * n));
  if (op == CommOp::all_gather && a.numel() != b->numel() * n)
    throw Error(where + "output has " + std::to_string(a.numel()) + " elements, expected input " +
                std::to_string(b->numel()) + " x group size " + std::to_string(n) + " = " + std::to_string(b->numel() * n));
}

WorkPtr Communicator::send(const at::Tensor& tensor, int peer) {
  return batch_p2p({P2POp{P2POp::Kind::send, tensor, peer}});
}

WorkPtr Communicator::recv(at::Tensor& tensor, int peer) {
  return batch_p2p({P2POp{P2POp::Kind::recv, tensor, peer}});
}

CommOp p2p_kind(const std::vector<P2POp>& ops) {
  if (ops.size() != 1) return CommOp::batch_p2p;
  return ops[0].kind == P2POp::Kind::send ? CommOp::send : CommOp::recv;
}

P2PBatch check_p2p_args(const Communicator& comm, const std::vector<P2POp>& ops,
                        const std::function<void(CommOp, const at::Tensor&)>& check_device) {
  P2PBatch batch{p2p_kind(ops)};
  for (const auto& op : ops) {
    check_collective_args(batch.kind, comm, op.tensor, nullptr);
    check_device(batch.kind, op.tensor);
    if (op.peer < 0 || op.peer >= comm.size() || op.peer == comm.rank())
      throw Error(std::string(comm_op_name(batch.kind)) + " on group '" + comm.name() + "': peer " +
                  std::to_string(op.peer) + " is not another rank of this group of " + std::to_string(comm.size()));
    batch.tensors.push_back(op.tensor);
    batch.bytes += op.tensor.nbytes();
  }
  return batch;
}

std::pair<int, int> split_color_key(const Communicator& comm, const std::vector<std::vector<int64_t>>& groups,
                                    const std::string& new_name) {
  const std::string where = "split of group '" + comm.name() + "' into '" + new_name + "': ";
  std::vector<int> seen(comm.size(), 0);
  int color = -1, key = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const int64_t r = groups[g][i];
      if (r < 0 || r >= comm.size())
        throw Error(where + "rank " + std::to_string(r) + " is outside 0.." + std::to_string(comm.size() - 1));
      if (seen[r]++) throw Error(where + "rank " + std::to_string(r) + " is in two groups");
      if (r == comm.rank()) {
        color = static_cast<int>(g);
        key = static_cast<int>(i);
      }
    }
  for (int r = 0; r < comm.size(); ++r)
    if (!seen[r])
      throw Error(where + "rank " + std::to_string(r) + " is in none of the groups; the groups must partition all " +
                  std::to_string(comm.size()) + " ranks");
  return {color, key};
}

}  // namespace stratum::distributed
