#include "stratum/distributed/mpi_communicator.h"
#include "stratum/distributed/wait_context.h"

#include <ATen/ops/empty_like.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <thread>

#include "stratum/core/heartbeat.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/mpi_session.h"

namespace stratum::distributed {
namespace {

using Clock = std::chrono::steady_clock;

bool is_16bit_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// The MPI type that moves (not reduces) this dtype's bytes.
MPI_Datatype transport_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;  // moved as raw 16-bit words
    default:
      throw Error(std::string("MPI backend: dtype ") + c10::toString(t) + " is not supported");
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int mpi_count(int64_t numel, CommOp op) {
  if (numel > INT_MAX)
    throw Error(std::string("MPI backend: ") + comm_op_name(op) + " of " + std::to_string(numel) +
                " elements exceeds MPI's int count; split the tensor");
  return static_cast<int>(numel);
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("MPI error in ") + what + ": " + std::string(msg, len));
}

// A set of MPI requests plus what to do once they complete (copy a staged fp32
// result back, divide for avg). Holds the tensors so their memory outlives the call.
class MpiWork : public Work {
 public:
  MpiWork(std::string description, CommOptions options, std::vector<at::Tensor> keep_alive)
      : description_(std::move(description)), options_(options), keep_alive_(std::move(keep_alive)),
        start_(Clock::now()) {}

  std::vector<MPI_Request> requests;
  std::function<void()> finish;

  bool completed() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE),
              description_.c_str());
    if (flag) complete();
    return done_;
  }

  void wait() override {
    int spins = 0;
    while (!completed()) {
      heartbeat::beat();  // waiting on peers is progress: a stuck peer stops beating, this rank does not
      if (Clock::now() - start_ > options_.timeout) timed_out();
      // Ranks may outnumber cores (tests oversubscribe): give the CPU away.
      if (++spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
      else std::this_thread::yield();
    }
  }

 private:
  void complete() {
    done_ = true;
    if (finish) finish();
    keep_alive_.clear();
  }

  [[noreturn]] void timed_out() {
    const double seconds = std::chrono::duration<double>(options_.timeout).count();
    const std::string msg = WaitContext::prefix() + description_ + " timed out after " + std::to_string(seconds).substr(0, 5) +
                            " s: a peer never joined it (it crashed, hangs, or issued a different collective)";
    if (options_.abort_on_timeout) abort_job(msg, kExitCommTimeout);
    throw CommTimeout(msg);
  }

  std::string description_;
  CommOptions options_;
  std::vector<at::Tensor> keep_alive_;
  Clock::time_point start_;
  bool done_ = false;
};

}  // namespace

std::shared_ptr<MpiCommunicator> MpiCommunicator::world(const CommOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw Error("MpiCommunicator::world: MPI is not initialized; call stratum::distributed::init() first");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int64_t> ranks(size);
  for (int i = 0; i < size; ++i) ranks[i] = i;
  return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(MPI_COMM_WORLD, false, ranks, "world", options));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned, std::vector<int64_t> global_ranks, std::string name,
                                 CommOptions options)
    : Communicator(0, std::move(global_ranks), std::move(name), options),
      session_(mpi_session()),
      comm_(comm),
      owned_(owned) {
  MPI_Comm_rank(comm_, &rank_);
  // Errors come back as codes that we turn into messages, instead of MPI aborting silently.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check_cpu(CommOp op, const at::Tensor& t) const {
  if (t.defined() && !t.device().is_cpu())
    throw Error(std::string(comm_op_name(op)) + " on group '" + name() + "': the MPI backend takes CPU tensors, got " +
                t.device().str() + " (use the NCCL communicator for CUDA tensors)");
}

WorkPtr MpiCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_collective_args(CommOp::all_reduce, *this, tensor, nullptr);
  check_cpu(CommOp::all_reduce, tensor);
  const bool floating = at::isFloatingType(tensor.scalar_type());
  if (op == ReduceOp::avg && !floating)
    throw Error("all_reduce on group '" + name() + "': avg needs a floating dtype, got " +
                c10::toString(tensor.scalar_type()));
  const uint64_t seq = ++seq_;
  // 16-bit floats reduce in fp32 and are rounded once at the end.
  at::Tensor work_tensor = is_16bit_float(tensor.scalar_type()) ? tensor.to(at::kFloat) : tensor;
  auto w = std::make_shared<MpiWork>(describe(CommOp::all_reduce, seq, tensor.nbytes(), c10::toString(tensor.scalar_type())),
                                     options_, std::vector<at::Tensor>{tensor, work_tensor});
  w->requests.resize(1);
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, work_tensor.data_ptr(), mpi_count(tensor.numel(), CommOp::all_reduce),
                           transport_type(work_tensor.scalar_type()), mpi_op(op), comm_, &w->requests[0]),
            "MPI_Iallreduce");
  const int n = size();
  at::Tensor target = tensor;
  w->finish = [target, work_tensor, op, n]() mutable {
    if (op == ReduceOp::avg) work_tensor.div_(n);
    if (!work_tensor.is_same(target)) target.copy_(work_tensor);
  };
  return w;
}

WorkPtr MpiCommunicator::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  check_collective_args(CommOp::reduce_scatter, *this, output, &input);
  check_cpu(CommOp::reduce_scatter, input);
  if (op == ReduceOp::avg && !at::isFloatingType(input.scalar_type()))
    throw Error("reduce_scatter on group '" + name() + "': avg needs a floating dtype");
  const uint64_t seq = ++seq_;
  const bool staged = is_16bit_float(input.scalar_type());
  at::Tensor in = staged ? input.to(at::kFloat) : input;
  // In place (the output is this rank's chunk of the input): MPI wants separate buffers.
  const bool aliased = !staged && output.data_ptr() == static_cast<char*>(input.data_ptr()) + rank() * output.nbytes();
  at::Tensor out = staged || aliased ? at::empty_like(output, output.options().dtype(in.scalar_type())) : output;
  auto w = std::make_shared<MpiWork>(describe(CommOp::reduce_scatter, seq, input.nbytes(), c10::toString(input.scalar_type())),
                                     options_, std::vector<at::Tensor>{output, input, in, out});
  w->requests.resize(1);
  check_mpi(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), mpi_count(output.numel(), CommOp::reduce_scatter),
                                      transport_type(in.scalar_type()), mpi_op(op), comm_, &w->requests[0]),
            "MPI_Ireduce_scatter_block");
  const int n = size();
  at::Tensor target = output;
  w->finish = [target, out, op, n]() mutable {
    if (op == ReduceOp::avg) out.div_(n);
    if (!out.is_same(target)) target.copy_(out);
  };
  return w;
}

WorkPtr MpiCommunicator::all_gather(at::Tensor& output, const at::Tensor& input) {
  check_collective_args(CommOp::all_gather, *this, output, &input);
  check_cpu(CommOp::all_gather, input);
  const uint64_t seq = ++seq_;
  auto w = std::make_shared<MpiWork>(describe(CommOp::all_gather, seq, output.nbytes(), c10::toString(input.scalar_type())),
                                     options_, std::vector<at::Tensor>{output, input});
  w->requests.resize(1);
  const MPI_Datatype type = transport_type(input.scalar_type());
  const int count = mpi_count(input.numel(), CommOp::all_gather);
  // In place (the input is this rank's block of the output): MPI wants MPI_IN_PLACE, not aliased buffers.
  const bool in_place = input.data_ptr() == static_cast<char*>(output.data_ptr()) + rank() * input.nbytes();
  check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : input.data_ptr(), count, type, output.data_ptr(), count, type,
                           comm_, &w->requests[0]),
            "MPI_Iallgather");
  return w;
}

WorkPtr MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_collective_args(CommOp::broadcast, *this, tensor, nullptr);
  check_cpu(CommOp::broadcast, tensor);
  if (root < 0 || root >= size())
    throw Error("broadcast on group '" + name() + "': root " + std::to_string(root) + " is not in 0.." +
                std::to_string(size() - 1));
  const uint64_t seq = ++seq_;
  auto w = std::make_shared<MpiWork>(describe(CommOp::broadcast, seq, tensor.nbytes(), c10::toString(tensor.scalar_type())),
                                     options_, std::vector<at::Tensor>{tensor});
  w->requests.resize(1);
  check_mpi(MPI_Ibcast(tensor.data_ptr(), mpi_count(tensor.numel(), CommOp::broadcast),
                       transport_type(tensor.scalar_type()), root, comm_, &w->requests[0]),
            "MPI_Ibcast");
  return w;
}

WorkPtr MpiCommunicator::batch_p2p(const std::vector<P2POp>& ops) {
  P2PBatch batch = check_p2p_args(*this, ops, [this](CommOp op, const at::Tensor& t) { check_cpu(op, t); });
  const CommOp kind = batch.kind;
  const uint64_t seq = ++seq_;
  auto w = std::make_shared<MpiWork>(describe(kind, seq, batch.bytes, ""), options_, std::move(batch.tensors));
  w->requests.resize(ops.size());
  // Receives first, so that a pair of ranks exchanging both ways never waits on each other.
  std::vector<size_t> order(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return ops[i].kind == P2POp::Kind::recv; });
  for (size_t k = 0; k < order.size(); ++k) {
    const P2POp& op = ops[order[k]];
    const int count = mpi_count(op.tensor.numel(), kind);
    const MPI_Datatype type = transport_type(op.tensor.scalar_type());
    if (op.kind == P2POp::Kind::recv)
      check_mpi(MPI_Irecv(op.tensor.data_ptr(), count, type, op.peer, 0, comm_, &w->requests[k]), "MPI_Irecv");
    else
      check_mpi(MPI_Isend(op.tensor.data_ptr(), count, type, op.peer, 0, comm_, &w->requests[k]), "MPI_Isend");
  }
  return w;
}

WorkPtr MpiCommunicator::barrier() {
  const uint64_t seq = ++seq_;
  auto w = std::make_shared<MpiWork>(describe(CommOp::barrier, seq, 0, ""), options_, std::vector<at::Tensor>{});
  w->requests.resize(1);
  check_mpi(MPI_Ibarrier(comm_, &w->requests[0]), "MPI_Ibarrier");
  return w;
}

std::shared_ptr<Communicator> MpiCommunicator::split(const std::vector<std::vector<int64_t>>& groups,
                                                     const std::string& name) {
  const auto [color, key] = split_color_key(*this, groups, name);
  MPI_Comm sub;
  check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
  std::vector<int64_t> members;
  for (int64_t r : groups[color]) members.push_back(global_ranks_[r]);
  return std::shared_ptr<Communicator>(new MpiCommunicator(sub, true, members, name, options_));
}

}  // namespace stratum::distributed
