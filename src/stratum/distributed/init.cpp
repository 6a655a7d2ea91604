#include "stratum/distributed/init.h"

#include <algorithm>

#include <mpi.h>

#include <cstdlib>

#include "stratum/core/log.h"
#include "stratum/distributed/launch/slurm_env.h"
#include "stratum/distributed/mpi_communicator.h"
#ifdef STRATUM_WITH_NCCL
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

}  // namespace

DistContext init(const InitOptions& options) {
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

  ctx.cpu_world = MpiCommunicator::world(ctx.options);
#ifdef STRATUM_WITH_NCCL
  const char* disable = std::getenv("STRATUM_DISABLE_NCCL");
  const int gpus = cuda_device_count();
  if (options.use_nccl && !(disable && std::string(disable) == "1") && gpus > 0) {
    if (ctx.local_world_size > gpus) {
      // NCCL refuses two ranks on one GPU; such runs (CPU tests on a GPU box) get MPI only.
      log::warn(std::to_string(ctx.local_world_size) + " ranks on this node but " + std::to_string(gpus) +
                " GPUs: no NCCL communicator, CPU (MPI) only");
      return ctx;
    }
    ctx.cuda_device = ctx.local_rank;
    ctx.gpu_world = NcclCommunicator::world(*ctx.cpu_world, ctx.cuda_device, ctx.options);
  }
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
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace stratum::distributed
