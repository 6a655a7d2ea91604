#include "stratum/distributed/init.h"

#include <algorithm>

#include <mpi.h>

#include <cstdlib>
#include <mutex>

#include "stratum/core/fs.h"
#include "stratum/core/log.h"
#include "stratum/distributed/flight_report.h"
#include "stratum/distributed/launch/slurm_env.h"
#include "stratum/distributed/mpi_communicator.h"
#include "stratum/distributed/recording_communicator.h"
#ifdef STRATUM_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>

#include "stratum/distributed/nccl_communicator.h"
#endif

namespace stratum::distributed {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0) throw Error(std::string("environment variable ") + name + "='" + v + "' is not a rank");
  return static_cast<int>(x);
}

// STRATUM_SHARED_GPU: 1 (default) shares GPUs among more ranks than there are, 0 keeps those ranks on the CPU.
[[maybe_unused]] bool shared_gpu_from_env() {
  const char* v = std::getenv("STRATUM_SHARED_GPU");
  if (!v || !*v || std::string(v) == "1") return true;
  if (std::string(v) == "0") return false;
  throw Error(std::string("STRATUM_SHARED_GPU='") + v +
              "': expected 1 (ranks beyond the GPUs share them, over MPI) or 0 (those ranks run on the CPU)");
}

// The recorder abort_job dumps. Process-wide, as abort_job is: it ends the
// process from wherever a timeout or a lone error surfaces (a backend's wait,
// the NCCL watchdog's thread, the desync check), none of which holds the
// DistContext. It is only read there; a weak pointer, so the context still
// owns (and ends) the recorder.
std::mutex g_fatal_mutex;
std::weak_ptr<FlightRecorder> g_fatal_recorder;

// How often a rank's flight file is rewritten (when it changed): a stopped
// rank's file is at most this old, and the cost is one small file write per
// period while collectives run.
constexpr std::chrono::milliseconds kFlightFlushPeriod{1000};

std::shared_ptr<FlightRecorder> make_flight_recorder(int rank, int world_size) {
  auto recorder = std::make_shared<FlightRecorder>(rank, world_size);
  if (const char* dir = std::getenv("STRATUM_FLIGHT_DIR"); dir && *dir) {
    try {
      fs::make_directories(dir);
      recorder->set_file(flight_file(dir, rank));
      recorder->flush_every(kFlightFlushPeriod);
    } catch (const Error& e) {
      log::warn(std::string("STRATUM_FLIGHT_DIR: ") + e.what() + "; the flight recorder keeps its ring in memory only");
    }
  }
  std::lock_guard<std::mutex> lock(g_fatal_mutex);
  g_fatal_recorder = recorder;
  return recorder;
}

// Before the job ends: this rank's flight file, and on a timeout the report of
// who did not arrive, from every file of its directory (this host's ranks).
void dump_flight_recorder(int exit_code) noexcept {
  try {
    std::shared_ptr<FlightRecorder> recorder;
    {
      std::lock_guard<std::mutex> lock(g_fatal_mutex);
      recorder = g_fatal_recorder.lock();
    }
    if (!recorder) return;
    const bool timeout = exit_code == kExitCommTimeout;
    const char* reason = timeout ? "timeout" : "abort";
    if (recorder->write_file(reason)) {
      if (!timeout) return;
      const std::string file = recorder->file();
      const std::string dir = file.substr(0, file.rfind('/'));
      log::error(hang_report(read_flight_dir(dir), {}, flight_now_seconds()));
    } else if (timeout) {
      // No directory (plain mpirun without STRATUM_FLIGHT_DIR): this rank's own ring only.
      const RankFlight mine = parse_flight_file(recorder->format(reason), "this rank's flight recorder");
      log::error("flight recorder (set STRATUM_FLIGHT_DIR for every rank's, as stratum-run does): " +
                 last_operations(mine, flight_now_seconds()));
    }
  } catch (...) {  // the job is ending anyway: the report is a best effort
  }
}

}  // namespace

const char* device_comm_name(DeviceComm comm) {
  switch (comm) {
    case DeviceComm::none: return "none";
    case DeviceComm::nccl: return "nccl";
    case DeviceComm::mpi_staged: return "mpi_staged";
  }
  return "?";
}

DevicePlan plan_devices(int local_rank, int local_world_size, int gpus, bool nccl_disabled, bool shared_disabled) {
  DevicePlan plan;
  if (gpus <= 0 || nccl_disabled) return plan;
  if (local_rank < 0 || local_rank >= local_world_size)
    throw Error("local rank " + std::to_string(local_rank) + " is not one of this node's " +
                std::to_string(local_world_size) + " ranks, so it has no GPU: LOCAL_RANK and LOCAL_WORLD_SIZE (or "
                "OMPI_COMM_WORLD_LOCAL_RANK and _SIZE) disagree; start ranks with stratum-run or mpirun");
  if (local_world_size <= gpus) {
    plan.cuda_device = local_rank;
    plan.comm = DeviceComm::nccl;
    return plan;
  }
  const std::string ranks = std::to_string(local_world_size) + " ranks";
  const std::string gpu_count = std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs");
  if (shared_disabled) {
    plan.message = ranks + " on this node but " + gpu_count +
                   ": every rank on the CPU, tensors over MPI (STRATUM_SHARED_GPU=0)";
    return plan;
  }
  plan.cuda_device = local_rank % gpus;
  plan.comm = DeviceComm::mpi_staged;
  plan.message = ranks + " share " + gpu_count + " on this node: tensors travel over MPI staged through host " +
                 "memory (NCCL needs one GPU a rank; STRATUM_SHARED_GPU=0 keeps these ranks on the CPU)";
  return plan;
}

std::optional<std::string> default_cuda_allocator_settings(const char* alloc_conf, const char* cuda_alloc_conf) {
  if (alloc_conf != nullptr || cuda_alloc_conf != nullptr) return std::nullopt;
  return std::string("expandable_segments:True");
}

DistContext init(const InitOptions& options) {
  // Before anything allocates on a GPU: the allocator reads its settings once.
  if (const auto settings = default_cuda_allocator_settings(std::getenv("PYTORCH_ALLOC_CONF"),
                                                            std::getenv("PYTORCH_CUDA_ALLOC_CONF")))
    ::setenv("PYTORCH_CUDA_ALLOC_CONF", settings->c_str(), /*overwrite=*/0);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    throw Error("distributed::init: MPI was finalized already (by finalize(), or when the last communicator of an "
                "earlier DistContext went away) and cannot start again; keep one DistContext for the whole program");
  if (!initialized) {
    int provided = 0;
    // MULTIPLE lets later layers (offload, async checkpoints) call MPI from helper threads.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw Error("MPI_Init_thread failed: is this process started by mpirun / stratum-run with a working Open MPI?");
  }
  DistContext ctx;
  ctx.options = options.comm;
  MPI_Comm_rank(MPI_COMM_WORLD, &ctx.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ctx.world_size);
  log::set_rank(ctx.rank);

  // Which launcher: stratum-run sets RANK etc.; mpirun sets OMPI_COMM_WORLD_*;
  // srun sets SLURM_PROCID and gives MPI its world through PMIx.
  const bool has_rank_env = std::getenv("RANK") != nullptr;
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr;
  const auto slurm = under_mpirun ? std::nullopt : launch::slurm_task_from_env();
  // stratum-run's rank shim sets RANK under mpirun and, with --launcher slurm, under srun.
  ctx.launcher = has_rank_env && (under_mpirun || slurm) ? "stratum-run" : under_mpirun ? "mpirun" : slurm ? "srun" : "none";
  if (slurm && (slurm->rank != ctx.rank || slurm->world_size != ctx.world_size))
    throw Error("srun started task " + std::to_string(slurm->rank) + " of " + std::to_string(slurm->world_size) +
                " but MPI sees rank " + std::to_string(ctx.rank) + " of " + std::to_string(ctx.world_size) +
                ": srun must hand Open MPI its world through PMIx: srun --mpi=pmix -n N ... (`srun --mpi=list` "
                "shows what this SLURM has)");
  if (has_rank_env) {
    const int env_rank = env_int("RANK", -1), env_world = env_int("WORLD_SIZE", -1);
    if (env_rank != ctx.rank || env_world != ctx.world_size)
      throw Error("RANK=" + std::to_string(env_rank) + " WORLD_SIZE=" + std::to_string(env_world) +
                  " from the environment disagree with MPI (rank " + std::to_string(ctx.rank) + " of " +
                  std::to_string(ctx.world_size) + "); start ranks with stratum-run or mpirun, not both by hand");
  }
  ctx.local_rank = env_int("LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK", slurm ? slurm->local_rank : 0));
  ctx.local_world_size = local_world_size_from_env();

  ctx.flight = make_flight_recorder(ctx.rank, ctx.world_size);
  ctx.cpu_world = with_flight_recorder(MpiCommunicator::world(ctx.options), ctx.flight);
#ifdef STRATUM_WITH_NCCL
  const char* disable = std::getenv("STRATUM_DISABLE_NCCL");
  const bool nccl_disabled = !options.use_nccl || (disable && std::string(disable) == "1");
  const DevicePlan plan =
      plan_devices(ctx.local_rank, ctx.local_world_size, cuda_device_count(), nccl_disabled, !shared_gpu_from_env());
  if (!plan.message.empty() && ctx.local_rank == 0) log::warn(plan.message);
  ctx.cuda_device = plan.cuda_device;
  ctx.device_comm = plan.comm;
  if (plan.comm == DeviceComm::nccl)
    ctx.gpu_world =
        with_flight_recorder(NcclCommunicator::world(*ctx.cpu_world, ctx.cuda_device, ctx.options), ctx.flight);
  else if (plan.comm == DeviceComm::mpi_staged)
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(ctx.cuda_device));
#endif
  return ctx;
}

int local_world_size_from_env() {
  int fallback = 1;
  if (std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE") == nullptr)
    if (const auto slurm = launch::slurm_task_from_env()) fallback = slurm->local_world_size;
  return std::max(1, env_int("LOCAL_WORLD_SIZE", env_int("OMPI_COMM_WORLD_LOCAL_SIZE", fallback)));
}

void finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

void abort_job(const std::string& message, int exit_code) {
  log::error(message + "; ending the job");
  dump_flight_recorder(exit_code);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace stratum::distributed
