#pragma once
// Process-level set-up of the distributed runtime. init() works under
// stratum-run, under plain mpirun, and as a single process with no launcher
// (MPI's singleton mode). What it returns is passed explicitly to whoever
// needs it: there is no global communicator.
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "stratum/distributed/communicator.h"

namespace stratum::distributed {

// Exit status of a job ended by a collective timeout (like timeout(1)).
constexpr int kExitCommTimeout = 124;

struct DistContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string launcher;  // "stratum-run", "mpirun", "srun" or "none"
  int cuda_device = -1;  // the GPU of this rank (LOCAL_RANK), -1 without CUDA
  CommOptions options;
  std::shared_ptr<Communicator> cpu_world;  // MPI, always
  std::shared_ptr<Communicator> gpu_world;  // NCCL, when CUDA is available (else null)
  // The communicator for tensors on the training device.
  const std::shared_ptr<Communicator>& device_world() const { return gpu_world ? gpu_world : cpu_world; }
  // The training device: this rank's GPU when NCCL is up, else the CPU (where
  // stratum::initialize puts the model; inputs go there too).
  c10::Device device() const {
    return gpu_world ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)) : c10::Device(c10::kCPU);
  }
};

struct InitOptions {
  CommOptions comm = CommOptions::from_env();
  // Create the NCCL world when this build and machine have CUDA (STRATUM_DISABLE_NCCL=1 turns it off).
  bool use_nccl = true;
};

// Initializes MPI (and NCCL), checks RANK/WORLD_SIZE against MPI when a launcher
// set them, sets the log prefix to the rank. Throws stratum::Error on mismatch.
DistContext init(const InitOptions& options = InitOptions());
// MPI_Finalize, once; safe to call twice. Not needed: MPI finalizes itself when
// the last communicator (the context's, the engine's) is destroyed
// (mpi_session.h). Called by hand, call it after every CUDA tensor, engine and
// communicator is gone: Open MPI's CUDA support releases the CUDA context in
// MPI_Finalize, and memory freed after that fails ("context is destroyed").
// Either way, make the DistContext before the model and the engine so that it
// is destroyed after them.
void finalize();

// Ranks on this node as the launcher says (LOCAL_WORLD_SIZE from stratum-run,
// else Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else srun's
// SLURM_STEP_TASKS_PER_NODE, else 1): what shares the host's cores.
int local_world_size_from_env();

// Prints `message` (with the rank) and ends the whole job: MPI_Abort when MPI
// is up, else exit. For timeouts and errors after which other ranks would hang.
[[noreturn]] void abort_job(const std::string& message, int exit_code);

}  // namespace stratum::distributed
