#pragma once
// Process-level set-up of the distributed runtime. init() works under
// stratum-run, under plain mpirun, and as a single process with no launcher
// (MPI's singleton mode). What it returns is passed explicitly to whoever
// needs it: there is no global communicator.
#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "stratum/distributed/communicator.h"
#include "stratum/distributed/flight_recorder.h"

namespace stratum::distributed {

// Exit status of a job ended by a collective timeout (like timeout(1)).
constexpr int kExitCommTimeout = 124;

// How tensors on the training device travel between ranks.
enum class DeviceComm {
  none,        // no GPU for this rank: it trains on the CPU, MPI carries everything
  nccl,        // one GPU a rank: the NCCL world
  mpi_staged,  // ranks share GPUs: MPI carries CUDA tensors staged through pinned host memory
};
const char* device_comm_name(DeviceComm comm);

struct DistContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string launcher;  // "stratum-run", "mpirun", "srun" or "none"
  // This rank's GPU: LOCAL_RANK with NCCL, LOCAL_RANK % GPUs when ranks share
  // them; -1 when it trains on the CPU.
  int cuda_device = -1;
  DeviceComm device_comm = DeviceComm::none;
  CommOptions options;
  std::shared_ptr<Communicator> cpu_world;  // MPI, always
  std::shared_ptr<Communicator> gpu_world;  // the NCCL world (DeviceComm::nccl), else null
  // Every operation of both worlds and the groups split from them
  // (recording_communicator.h); written to STRATUM_FLIGHT_DIR when set.
  std::shared_ptr<FlightRecorder> flight;
  bool on_gpu() const { return cuda_device >= 0; }
  // The communicator for tensors on the training device: NCCL's, else MPI's
  // (which stages CUDA tensors through host memory when ranks share a GPU).
  const std::shared_ptr<Communicator>& device_world() const { return gpu_world ? gpu_world : cpu_world; }
  // The training device: this rank's GPU when it has one, else the CPU (where
  // stratum::initialize puts the model; inputs go there too).
  c10::Device device() const {
    return on_gpu() ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)) : c10::Device(c10::kCPU);
  }
};

struct InitOptions {
  CommOptions comm = CommOptions::from_env();
  // Put ranks on GPUs when this build and machine have CUDA; false (or
  // STRATUM_DISABLE_NCCL=1) keeps every rank on the CPU.
  bool use_nccl = true;
};

// Where a rank trains and how its device tensors travel: the rule init()
// applies (pure, for tests). `gpus` is what this node has (0 without CUDA).
//   - no GPU, or `nccl_disabled`: the CPU, MPI;
//   - ranks <= GPUs: GPU `local_rank`, NCCL;
//   - more ranks than GPUs: GPU `local_rank % gpus`, MPI through host memory
//     (NCCL refuses two ranks on one GPU); `shared_disabled` (STRATUM_SHARED_GPU=0)
//     puts them on the CPU instead.
// `message` is what local rank 0 says about it at start ("" when nothing).
struct DevicePlan {
  int cuda_device = -1;
  DeviceComm comm = DeviceComm::none;
  std::string message;
};
DevicePlan plan_devices(int local_rank, int local_world_size, int gpus, bool nccl_disabled, bool shared_disabled);

// The CUDA caching allocator's settings init() starts a rank with, given the
// environment's PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF (null when
// unset): "expandable_segments:True" when neither is set, so that blocks freed
// between tensors of different sizes are reused rather than stranded (a
// 128K-token llama-8b step on an 80 GB GPU failed with 14 GiB reserved but
// free); nothing when the user chose settings. Pure, for tests.
std::optional<std::string> default_cuda_allocator_settings(const char* alloc_conf, const char* cuda_alloc_conf);

// Initializes MPI (and NCCL), checks RANK/WORLD_SIZE against MPI when a launcher
// set them, sets the log prefix to the rank, picks the rank's GPU by
// plan_devices. Throws stratum::Error on mismatch.
// Environment: STRATUM_FLIGHT_DIR (stratum-run sets it): the flight recorder
// writes <dir>/rank<N>.txt every second when it changed and when the job aborts;
// a collective timeout then prints the hang report (flight_report.h) from the
// files there. STRATUM_DISABLE_NCCL=1: CPU ranks only. STRATUM_SHARED_GPU: when
// a node runs more ranks than it has GPUs, 1 (the default) shares the GPUs
// round-robin, tensors over MPI through host memory; 0 puts those ranks on the CPU.
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
// Before that, the flight recorder of the last init() writes its file and, for
// a timeout (kExitCommTimeout), the hang report read from its directory is
// printed.
[[noreturn]] void abort_job(const std::string& message, int exit_code);

}  // namespace stratum::distributed
