#include "stratum/distributed/nccl_communicator.h"
#include "stratum/distributed/mpi_session.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <ATen/ops/empty.h>

#include <atomic>
#include <cstring>
#include <condition_variable>
#include <cstdlib>
#include <list>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "stratum/core/cuda_launch.h"
#include "stratum/core/heartbeat.h"
#include "stratum/core/log.h"
#include "stratum/distributed/init.h"

namespace stratum::distributed {
namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t e, const char* what) {
  stratum::cuda::check_launch(e, std::string("CUDA error in ") + what);
}

void check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw Error("NCCL error in " + what + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")");
}

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kChar: return ncclInt8;
    case at::kByte:
    case at::kBool: return ncclUint8;
    default: throw Error(std::string("NCCL backend: dtype ") + c10::toString(t) + " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// One operation in flight: its completion event on the communicator's stream.
struct Pending {
  cudaEvent_t done = nullptr;
  // Recorded just before the NCCL kernel: once it has completed and `done` has
  // not, the kernel runs and waits on peers (this rank makes progress; it is
  // not stuck in its own work).
  cudaEvent_t started = nullptr;
  // False while the host is still inside the NCCL call: the first collective of
  // a communicator can block there until every peer has connected.
  std::atomic<bool> launched{false};
  Clock::time_point deadline;
  std::string description;
  ~Pending() {
    if (done) cudaEventDestroy(done);
    if (started) cudaEventDestroy(started);
  }
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;
  CommOptions options;
  std::string group_description;

  // Watchdog: ends the job when an operation outlives its deadline.
  std::mutex mutex;
  std::condition_variable wake;
  std::list<std::shared_ptr<Pending>> pending;
  bool stopping = false;
  std::thread watchdog;

  void start_watchdog() {
    watchdog = std::thread([this] { watch(); });
  }

  void watch() {
    cudaSetDevice(device);
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      bool waiting_on_peers = false;
      for (auto it = pending.begin(); it != pending.end();) {
        // An unrecorded event reads as complete: only launched operations are queried.
        cudaError_t q = (*it)->launched ? cudaEventQuery((*it)->done) : cudaErrorNotReady;
        if (q == cudaSuccess) {
          it = pending.erase(it);
          continue;
        }
        if (q != cudaErrorNotReady) {
          abort_job((*it)->description + " failed on the device: " + cudaGetErrorString(q), 1);
        }
        if (Clock::now() > (*it)->deadline) {
          ncclResult_t async_error = ncclSuccess;
          ncclCommGetAsyncError(comm, &async_error);
          const double s = std::chrono::duration<double>(options.timeout).count();
          std::string msg = (*it)->description + " timed out after " + std::to_string(s).substr(0, 5) +
                            " s: a peer never joined it (it crashed, hangs, or issued a different collective)";
          if (!(*it)->launched) msg += "; the host was still blocked in the NCCL call";
          if (async_error != ncclSuccess) msg += "; NCCL reports: " + std::string(ncclGetErrorString(async_error));
          // MPI_Abort ends every rank (and the kernels stuck in the collective with them).
          // No ncclCommAbort first: it would wake the blocked caller, whose error could end
          // this process before the report is out.
          abort_job(msg, kExitCommTimeout);
        }
        // Inside the NCCL call (connecting), or its kernel running: waiting on peers.
        waiting_on_peers = waiting_on_peers || !(*it)->launched || cudaEventQuery((*it)->started) == cudaSuccess;
        ++it;
      }
      if (waiting_on_peers) heartbeat::beat();
    }
  }

  // Registered before the NCCL call, so that a call that never returns is caught too.
  std::shared_ptr<Pending> begin(std::string description) {
    auto p = std::make_shared<Pending>();
    check_cuda(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&p->started, cudaEventDisableTiming), "cudaEventCreate");
    p->deadline = Clock::now() + options.timeout;
    p->description = std::move(description);
    std::lock_guard<std::mutex> lock(mutex);
    pending.push_back(p);
    return p;
  }

  void launched(Pending& p) {
    check_cuda(cudaEventRecord(p.done, stream), "cudaEventRecord");
    p.launched = true;
    wake.notify_all();
  }

  ~State() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (watchdog.joinable()) watchdog.join();
    if (comm) {
      cudaStreamSynchronize(stream);
      ncclCommDestroy(comm);
    }
    // The stream itself stays (as torch's pool streams do): a tensor the
    // caching allocator saw used on it (record_stream) may be freed after the
    // communicator goes, and that free records an event on this stream; on a
    // destroyed stream it crashes (a model outliving the engine's groups).
  }
};

namespace {

// The event pairs of set_exposed_comm_timing: recorded from any thread that
// waits, read by take_exposed_comm_seconds; spent events are reused.
struct WaitTimer {
  std::mutex mutex;
  std::atomic<bool> on{false};
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> recorded, spare;

  std::pair<cudaEvent_t, cudaEvent_t> acquire() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!spare.empty()) {
      auto p = spare.back();
      spare.pop_back();
      return p;
    }
    std::pair<cudaEvent_t, cudaEvent_t> p;
    check_cuda(cudaEventCreate(&p.first), "cudaEventCreate");
    check_cuda(cudaEventCreate(&p.second), "cudaEventCreate");
    return p;
  }
};

WaitTimer& wait_timer() {
  static WaitTimer* timer = new WaitTimer;  // never destroyed: events outlive static teardown order
  return *timer;
}

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<Pending> pending, int device, CommOptions options, bool host_blocking)
      : pending_(std::move(pending)), device_(device), options_(options), host_blocking_(host_blocking) {}

  void wait() override {
    if (host_blocking_) return synchronize();
    // Stream-ordered: whatever the caller runs next on its stream sees the result.
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_).stream();
    WaitTimer& timer = wait_timer();
    if (!timer.on.load(std::memory_order_relaxed)) {
      check_cuda(cudaStreamWaitEvent(stream, pending_->done, 0), "cudaStreamWaitEvent");
      return;
    }
    auto events = timer.acquire();
    check_cuda(cudaEventRecord(events.first, stream), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream, pending_->done, 0), "cudaStreamWaitEvent");
    check_cuda(cudaEventRecord(events.second, stream), "cudaEventRecord");
    std::lock_guard<std::mutex> lock(timer.mutex);
    timer.recorded.push_back(events);
  }

  void wait_in_background() override {
    if (host_blocking_) return synchronize();
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    check_cuda(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), pending_->done, 0),
               "cudaStreamWaitEvent");
  }

  void synchronize() override {
    // Poll rather than cudaEventSynchronize so that a hang is bounded by the timeout
    // (the watchdog also catches it; whichever comes first ends the job).
    int spins = 0;
    while (!completed()) {
      if (Clock::now() > pending_->deadline + std::chrono::seconds(5))
        abort_job(pending_->description + " did not complete (host wait)", kExitCommTimeout);
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  bool completed() override {
    if (!pending_->launched) return false;
    cudaError_t q = cudaEventQuery(pending_->done);
    if (q == cudaErrorNotReady) return false;
    check_cuda(q, "cudaEventQuery");
    return true;
  }

 private:
  std::shared_ptr<Pending> pending_;
  int device_;
  CommOptions options_;
  bool host_blocking_;
};

}  // namespace

void set_exposed_comm_timing(bool on) { wait_timer().on = on; }

double take_exposed_comm_seconds() {
  WaitTimer& timer = wait_timer();
  std::lock_guard<std::mutex> lock(timer.mutex);
  double seconds = 0;
  for (auto& [begin, end] : timer.recorded) {
    check_cuda(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    seconds += ms / 1e3;
    timer.spare.emplace_back(begin, end);
  }
  timer.recorded.clear();
  return seconds;
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<State> state, int rank, std::vector<int64_t> global_ranks,
                                   std::string name, CommOptions options)
    : Communicator(rank, std::move(global_ranks), std::move(name), options),
      session_(mpi_session()),
      state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::device() const { return state_->device; }

std::shared_ptr<NcclCommunicator> NcclCommunicator::world(Communicator& bootstrap, int device,
                                                          const CommOptions& options) {
  // NVLink SHARP (multicast) stays off unless the user asked for it explicitly.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  at::Tensor id = at::empty({static_cast<int64_t>(sizeof(ncclUniqueId))}, at::kByte);
  if (bootstrap.rank() == 0) {
    ncclUniqueId uid;
    check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
    std::memcpy(id.data_ptr(), &uid, sizeof uid);
  }
  bootstrap.broadcast(id, 0)->wait();
  ncclUniqueId uid;
  std::memcpy(&uid, id.data_ptr(), sizeof uid);

  auto state = std::make_shared<State>();
  state->device = device;
  state->options = options;
  int least = 0, greatest = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  check_cuda(cudaStreamCreateWithPriority(&state->stream, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
  check_nccl(ncclCommInitRank(&state->comm, bootstrap.size(), uid, bootstrap.rank()),
             "ncclCommInitRank (rank " + std::to_string(bootstrap.rank()) + " of " + std::to_string(bootstrap.size()) +
                 ", cuda:" + std::to_string(device) + ")");
  state->start_watchdog();
  return std::shared_ptr<NcclCommunicator>(
      new NcclCommunicator(state, bootstrap.rank(), bootstrap.global_ranks(), "world", options));
}

namespace {

// The part every operation shares: order after the caller's stream, run `launch`
// on the communicator's stream, keep the tensors' memory alive for that stream.
template <typename Launch>
WorkPtr enqueue(NcclCommunicator::State& s, const std::string& description, const std::vector<at::Tensor>& tensors,
                bool host_blocking, Launch&& launch) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(s.device));
  cudaStream_t caller = c10::cuda::getCurrentCUDAStream(s.device).stream();
  cudaEvent_t ready;
  check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(ready, caller), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(s.stream, ready, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(ready);  // safe: destruction is deferred until the event completes
  auto pending = s.begin(description);
  check_cuda(cudaEventRecord(pending->started, s.stream), "cudaEventRecord");
  launch(s.stream);
  s.launched(*pending);
  auto comm_stream = c10::cuda::getStreamFromExternal(s.stream, static_cast<c10::DeviceIndex>(s.device));
  for (const auto& t : tensors)
    if (t.defined() && t.numel() > 0) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), comm_stream);
  return std::make_shared<NcclWork>(pending, s.device, s.options, host_blocking);
}

}  // namespace

static void check_cuda_tensor(const NcclCommunicator& c, CommOp op, const at::Tensor& t) {
  if (!t.is_cuda() || t.device().index() != c.device())
    throw Error(std::string(comm_op_name(op)) + " on group '" + c.name() + "': the NCCL communicator is on cuda:" +
                std::to_string(c.device()) + ", got a tensor on " + t.device().str());
}

WorkPtr NcclCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_collective_args(CommOp::all_reduce, *this, tensor, nullptr);
  check_cuda_tensor(*this, CommOp::all_reduce, tensor);
  if (op == ReduceOp::avg && !at::isFloatingType(tensor.scalar_type()))
    throw Error("all_reduce on group '" + name() + "': avg needs a floating dtype, got " +
                c10::toString(tensor.scalar_type()));
  const std::string d = describe(CommOp::all_reduce, ++seq_, tensor.nbytes(), c10::toString(tensor.scalar_type()));
  return enqueue(*state_, d, {tensor}, false, [&](cudaStream_t st) {
    if (tensor.numel() == 0) return;
    check_nccl(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                             nccl_op(op), state_->comm, st), d);
  });
}

WorkPtr NcclCommunicator::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  check_collective_args(CommOp::reduce_scatter, *this, output, &input);
  check_cuda_tensor(*this, CommOp::reduce_scatter, input);
  if (op == ReduceOp::avg && !at::isFloatingType(input.scalar_type()))
    throw Error("reduce_scatter on group '" + name() + "': avg needs a floating dtype");
  const std::string d = describe(CommOp::reduce_scatter, ++seq_, input.nbytes(), c10::toString(input.scalar_type()));
  return enqueue(*state_, d, {output, input}, false, [&](cudaStream_t st) {
    if (output.numel() == 0) return;
    check_nccl(ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), nccl_type(input.scalar_type()),
                                 nccl_op(op), state_->comm, st), d);
  });
}

WorkPtr NcclCommunicator::all_gather(at::Tensor& output, const at::Tensor& input) {
  check_collective_args(CommOp::all_gather, *this, output, &input);
  check_cuda_tensor(*this, CommOp::all_gather, input);
  const std::string d = describe(CommOp::all_gather, ++seq_, output.nbytes(), c10::toString(input.scalar_type()));
  return enqueue(*state_, d, {output, input}, false, [&](cudaStream_t st) {
    if (input.numel() == 0) return;
    check_nccl(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), nccl_type(input.scalar_type()),
                             state_->comm, st), d);
  });
}

WorkPtr NcclCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_collective_args(CommOp::broadcast, *this, tensor, nullptr);
  check_cuda_tensor(*this, CommOp::broadcast, tensor);
  if (root < 0 || root >= size())
    throw Error("broadcast on group '" + name() + "': root " + std::to_string(root) + " is not in 0.." +
                std::to_string(size() - 1));
  const std::string d = describe(CommOp::broadcast, ++seq_, tensor.nbytes(), c10::toString(tensor.scalar_type()));
  return enqueue(*state_, d, {tensor}, false, [&](cudaStream_t st) {
    if (tensor.numel() == 0) return;
    check_nccl(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                             root, state_->comm, st), d);
  });
}

WorkPtr NcclCommunicator::batch_p2p(const std::vector<P2POp>& ops) {
  const P2PBatch batch =
      check_p2p_args(*this, ops, [this](CommOp op, const at::Tensor& t) { check_cuda_tensor(*this, op, t); });
  const std::string d = describe(batch.kind, ++seq_, batch.bytes, "");
  return enqueue(*state_, d, batch.tensors, false, [&](cudaStream_t st) {
    // One group: NCCL pairs sends and receives in any order without deadlock.
    check_nccl(ncclGroupStart(), d);
    for (const auto& op : ops) {
      if (op.tensor.numel() == 0) continue;
      void* p = op.tensor.data_ptr();
      if (op.kind == P2POp::Kind::send)
        check_nccl(ncclSend(p, op.tensor.numel(), nccl_type(op.tensor.scalar_type()), op.peer, state_->comm, st), d);
      else
        check_nccl(ncclRecv(p, op.tensor.numel(), nccl_type(op.tensor.scalar_type()), op.peer, state_->comm, st), d);
    }
    check_nccl(ncclGroupEnd(), d);
  });
}

WorkPtr NcclCommunicator::barrier() {
  // A one-element all-reduce; wait() blocks the host, as a barrier should.
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(state_->device));
  at::Tensor token = at::empty({1}, at::TensorOptions().dtype(at::kFloat).device(c10::kCUDA, state_->device));
  const std::string d = describe(CommOp::barrier, ++seq_, 0, "");
  return enqueue(*state_, d, {token}, true, [&](cudaStream_t st) {
    check_nccl(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, state_->comm, st), d);
  });
}

std::shared_ptr<Communicator> NcclCommunicator::split(const std::vector<std::vector<int64_t>>& groups,
                                                      const std::string& name) {
  const auto [color, key] = split_color_key(*this, groups, name);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(state_->device));
  auto sub = std::make_shared<State>();
  sub->device = state_->device;
  sub->options = options_;
  int least = 0, greatest = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  check_cuda(cudaStreamCreateWithPriority(&sub->stream, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  check_nccl(ncclCommSplit(state_->comm, color, key, &sub->comm, &config), "ncclCommSplit into '" + name + "'");
  sub->start_watchdog();
  std::vector<int64_t> members;
  for (int64_t r : groups[color]) members.push_back(global_ranks_[r]);
  return std::shared_ptr<Communicator>(new NcclCommunicator(sub, key, members, name, options_));
}

}  // namespace stratum::distributed
