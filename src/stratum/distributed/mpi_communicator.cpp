#include "stratum/distributed/mpi_communicator.h"
#include "stratum/distributed/wait_context.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <mutex>
#include <thread>

#include "stratum/core/heartbeat.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/mpi_session.h"

namespace stratum::distributed {

using Leases = std::vector<std::shared_ptr<void>>;

// Pinned host buffers that CUDA tensors travel through. An operation takes one
// per tensor and gives it back once it completes, so operations in flight
// together never share one; buffers are kept for later calls and only grow.
class HostStaging : public std::enable_shared_from_this<HostStaging> {
 public:
  // A host tensor shaped like `t` in `dtype`, in a buffer held until `leases`
  // let it go; with `copy_in`, t's values. The copy runs on t's current stream
  // and, being blocking, synchronizes it: the values are in place before MPI
  // reads them, whatever that stream had queued.
  at::Tensor stage(const at::Tensor& t, at::ScalarType dtype, bool copy_in, Leases& leases) {
    at::Tensor host = take(t.numel() * static_cast<int64_t>(c10::elementSize(dtype)), leases).view(dtype).view(t.sizes());
    if (copy_in) host.copy_(t);
    return host;
  }

 private:
  at::Tensor take(int64_t bytes, Leases& leases) {
    if (bytes == 0) return at::empty({0}, at::kByte);
    at::Tensor buffer;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto fits = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->numel() >= bytes && (fits == free_.end() || it->numel() < fits->numel())) fits = it;
      if (fits != free_.end()) {
        buffer = std::move(*fits);
        free_.erase(fits);
      } else {
        // None fits: the largest free one makes way for a larger one.
        if (!free_.empty())
          free_.erase(std::max_element(free_.begin(), free_.end(),
                                       [](const at::Tensor& a, const at::Tensor& b) { return a.numel() < b.numel(); }));
        buffer = at::empty({capacity_for(bytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      }
    }
    leases.push_back(std::shared_ptr<void>(nullptr, [self = shared_from_this(), buffer](void*) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->free_.push_back(buffer);
    }));
    return buffer.narrow(0, 0, bytes);
  }

  // Powers of two up to 64 MiB, then multiples of 64 MiB: a few sizes serve calls of many.
  static int64_t capacity_for(int64_t bytes) {
    constexpr int64_t kStep = int64_t(64) << 20;
    if (bytes >= kStep) return (bytes + kStep - 1) / kStep * kStep;
    int64_t capacity = 4096;
    while (capacity < bytes) capacity <<= 1;
    return capacity;
  }

  std::mutex mutex_;
  std::vector<at::Tensor> free_;
};

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
  Leases leases;  // host staging buffers, given back once the results are copied out of them

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
    if (finish) {
      auto f = std::move(finish);
      finish = nullptr;
      f();
    }
    keep_alive_.clear();
    leases.clear();
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
#ifdef STRATUM_WITH_CUDA
  staging_ = std::make_shared<HostStaging>();
#endif
  // Errors come back as codes that we turn into messages, instead of MPI aborting silently.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check_device(CommOp op, const at::Tensor& t) const {
  if (!t.defined() || t.device().is_cpu() || (t.is_cuda() && staging_)) return;
  throw Error(std::string(comm_op_name(op)) + " on group '" + name() + "': the MPI backend takes CPU tensors" +
              (staging_ ? " and CUDA tensors" : "") + ", got " + t.device().str() +
              (t.is_cuda() ? " (this build of Stratum has no CUDA)" : ""));
}

WorkPtr MpiCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_collective_args(CommOp::all_reduce, *this, tensor, nullptr);
  check_device(CommOp::all_reduce, tensor);
  const bool floating = at::isFloatingType(tensor.scalar_type());
  if (op == ReduceOp::avg && !floating)
    throw Error("all_reduce on group '" + name() + "': avg needs a floating dtype, got " +
                c10::toString(tensor.scalar_type()));
  const uint64_t seq = ++seq_;
  // 16-bit floats reduce in fp32 and are rounded once at the end.
  const at::ScalarType wire = is_16bit_float(tensor.scalar_type()) ? at::kFloat : tensor.scalar_type();
  Leases leases;
  at::Tensor work_tensor = tensor.is_cuda()              ? staging_->stage(tensor, wire, true, leases)
                           : wire != tensor.scalar_type() ? tensor.to(wire)
                                                          : tensor;
  auto w = std::make_shared<MpiWork>(describe(CommOp::all_reduce, seq, tensor.nbytes(), c10::toString(tensor.scalar_type())),
                                     options_, std::vector<at::Tensor>{tensor, work_tensor});
  w->leases = std::move(leases);
  w->requests.resize(1);
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, work_tensor.data_ptr(), mpi_count(tensor.numel(), CommOp::all_reduce),
                           transport_type(work_tensor.scalar_type()), mpi_op(op), comm_, &w->requests[0]),
            "MPI_Iallreduce");
  const int n = size();
  at::Tensor target = tensor;
  w->finish = [target, work_tensor, op, n]() mutable {
    if (op == ReduceOp::avg) work_tensor.div_(n);
    if (!work_tensor.is_same(target)) target.copy_(work_tensor);  // to a CUDA tensor: blocking
  };
  return w;
}

WorkPtr MpiCommunicator::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  check_collective_args(CommOp::reduce_scatter, *this, output, &input);
  check_device(CommOp::reduce_scatter, input);
  if (op == ReduceOp::avg && !at::isFloatingType(input.scalar_type()))
    throw Error("reduce_scatter on group '" + name() + "': avg needs a floating dtype");
  const uint64_t seq = ++seq_;
  const bool staged = is_16bit_float(input.scalar_type());
  Leases leases;
  at::Tensor in, out;
  if (input.is_cuda()) {
    // Two host buffers: never aliased, even when the output is the input's chunk.
    const at::ScalarType wire = staged ? at::kFloat : input.scalar_type();
    in = staging_->stage(input, wire, true, leases);
    out = staging_->stage(output, wire, false, leases);
  } else {
    in = staged ? input.to(at::kFloat) : input;
    // In place (the output is this rank's chunk of the input): MPI wants separate buffers.
    const bool aliased = !staged && output.data_ptr() == static_cast<char*>(input.data_ptr()) + rank() * output.nbytes();
    out = staged || aliased ? at::empty_like(output, output.options().dtype(in.scalar_type())) : output;
  }
  auto w = std::make_shared<MpiWork>(describe(CommOp::reduce_scatter, seq, input.nbytes(), c10::toString(input.scalar_type())),
                                     options_, std::vector<at::Tensor>{output, input, in, out});
  w->leases = std::move(leases);
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
  check_device(CommOp::all_gather, input);
  const uint64_t seq = ++seq_;
  const MPI_Datatype type = transport_type(input.scalar_type());
  const int count = mpi_count(input.numel(), CommOp::all_gather);
  Leases leases;
  at::Tensor out = output;
  // In place (the input is this rank's block of the output): MPI wants MPI_IN_PLACE, not aliased buffers.
  bool in_place = input.data_ptr() == static_cast<char*>(output.data_ptr()) + rank() * input.nbytes();
  if (output.is_cuda()) {
    // Only this rank's block goes to the host, into its place: in place there.
    out = staging_->stage(output, output.scalar_type(), false, leases);
    out.view(-1).narrow(0, rank() * input.numel(), input.numel()).copy_(input.view(-1));
    in_place = true;
  }
  auto w = std::make_shared<MpiWork>(describe(CommOp::all_gather, seq, output.nbytes(), c10::toString(input.scalar_type())),
                                     options_, std::vector<at::Tensor>{output, input, out});
  w->leases = std::move(leases);
  w->requests.resize(1);
  check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : input.data_ptr(), count, type, out.data_ptr(), count, type,
                           comm_, &w->requests[0]),
            "MPI_Iallgather");
  if (output.is_cuda()) {
    at::Tensor target = output;
    w->finish = [target, out]() mutable { target.copy_(out); };
  }
  return w;
}

WorkPtr MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_collective_args(CommOp::broadcast, *this, tensor, nullptr);
  check_device(CommOp::broadcast, tensor);
  if (root < 0 || root >= size())
    throw Error("broadcast on group '" + name() + "': root " + std::to_string(root) + " is not in 0.." +
                std::to_string(size() - 1));
  const uint64_t seq = ++seq_;
  Leases leases;
  // Only the root's values are read.
  at::Tensor buffer = tensor.is_cuda() ? staging_->stage(tensor, tensor.scalar_type(), rank() == root, leases) : tensor;
  auto w = std::make_shared<MpiWork>(describe(CommOp::broadcast, seq, tensor.nbytes(), c10::toString(tensor.scalar_type())),
                                     options_, std::vector<at::Tensor>{tensor, buffer});
  w->leases = std::move(leases);
  w->requests.resize(1);
  check_mpi(MPI_Ibcast(buffer.data_ptr(), mpi_count(tensor.numel(), CommOp::broadcast),
                       transport_type(tensor.scalar_type()), root, comm_, &w->requests[0]),
            "MPI_Ibcast");
  if (tensor.is_cuda() && rank() != root) {
    at::Tensor target = tensor;
    w->finish = [target, buffer]() mutable { target.copy_(buffer); };
  }
  return w;
}

WorkPtr MpiCommunicator::batch_p2p(const std::vector<P2POp>& ops) {
  P2PBatch batch = check_p2p_args(*this, ops, [this](CommOp op, const at::Tensor& t) { check_device(op, t); });
  const CommOp kind = batch.kind;
  const uint64_t seq = ++seq_;
  // What MPI sends from and receives into: host copies of CUDA tensors (a send's holding its values).
  Leases leases;
  std::vector<at::Tensor> buffers;
  std::vector<std::pair<at::Tensor, at::Tensor>> received;  // (CUDA tensor, its host buffer), copied in at the end
  for (const P2POp& op : ops) {
    const bool send = op.kind == P2POp::Kind::send;
    buffers.push_back(op.tensor.is_cuda() ? staging_->stage(op.tensor, op.tensor.scalar_type(), send, leases) : op.tensor);
    if (op.tensor.is_cuda() && !send) received.emplace_back(op.tensor, buffers.back());
    if (op.tensor.is_cuda()) batch.tensors.push_back(buffers.back());
  }
  auto w = std::make_shared<MpiWork>(describe(kind, seq, batch.bytes, ""), options_, std::move(batch.tensors));
  w->leases = std::move(leases);
  w->requests.resize(ops.size());
  // Receives first, so that a pair of ranks exchanging both ways never waits on each other.
  std::vector<size_t> order(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return ops[i].kind == P2POp::Kind::recv; });
  for (size_t k = 0; k < order.size(); ++k) {
    const P2POp& op = ops[order[k]];
    void* data = buffers[order[k]].data_ptr();
    const int count = mpi_count(op.tensor.numel(), kind);
    const MPI_Datatype type = transport_type(op.tensor.scalar_type());
    if (op.kind == P2POp::Kind::recv)
      check_mpi(MPI_Irecv(data, count, type, op.peer, 0, comm_, &w->requests[k]), "MPI_Irecv");
    else
      check_mpi(MPI_Isend(data, count, type, op.peer, 0, comm_, &w->requests[k]), "MPI_Isend");
  }
  if (!received.empty())
    w->finish = [received]() mutable {
      for (auto& [target, buffer] : received) target.copy_(buffer);
    };
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
