#pragma once
// The per-rank shim: mpirun (or srun, with --slurm) starts `stratum-run
// --rank-shim ... -- PROGRAM ARGS` once per rank; the shim turns Open MPI's
// OMPI_COMM_WORLD_* variables (srun's SLURM_* ones) into the torchrun/DeepSpeed
// ones (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK;
// MASTER_ADDR/MASTER_PORT come exported from the launcher), sets
// CUDA_VISIBLE_DEVICES to the host's chosen devices (mpirun), runs the program, prefixes
// its output with "[rank N] " and names it when it fails. The pure parts are
// here (tested without processes); the process loop is rank_shim_run.h.
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stratum::distributed::launch {

inline constexpr const char* kRankShimFlag = "--rank-shim";

struct ShimArgs {
  bool slurm = false;                              // started by srun: rank, node and node rank from SLURM_*
  std::string node;                                // host name as the hostfile gives it (SLURM's under srun)
  int node_rank = 0;                               // index of that host in the launch
  std::optional<std::vector<std::string>> devices; // CUDA_VISIBLE_DEVICES entries (GPU launches)
  std::string log_dir;                             // also write rank_<N>.log there
  bool prefix = true;                              // "[rank N] " before each output line
  int heartbeat_timeout_s = 0;                     // end the rank when it stops making progress this long (0: never)
  std::vector<std::string> program;                // program and its arguments
};

// `--rank-shim --node NAME --node_rank I [--devices a,b] [--log_dir D] [--no_prefix]
//  [--heartbeat_timeout S] -- PROGRAM ARGS`; under srun `--rank-shim --slurm [--log_dir D] ...`
// (srun's task sees its node's GPUs and picks by local rank: no --devices).
std::vector<std::string> shim_arguments(const ShimArgs& args);
// Parses what follows `--rank-shim` (throws stratum::Error on anything else).
ShimArgs parse_shim_arguments(const std::vector<std::string>& args);

struct RankInfo {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
};
using GetEnv = std::function<const char*(const char*)>;
// From OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE; throws
// stratum::Error when they are missing (not started by mpirun) or malformed.
RankInfo rank_info_from_env(const GetEnv& getenv);
// The rank of a shim started as `args` says: rank_info_from_env, or with --slurm
// srun's SLURM_PROCID etc. (slurm_env.h), setting args.node from SLURMD_NODENAME
// (else `this_host`) and args.node_rank from SLURM_NODEID. Throws stratum::Error
// when srun's variables are missing (not a task of an srun step) or malformed.
RankInfo shim_rank_info(ShimArgs& args, const GetEnv& getenv, const std::string& this_host);

// The variables the shim sets for the program: RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, NODE_RANK, STRATUM_OUTPUT_PREFIXED=1 when it prefixes output
// lines, and, with devices, CUDA_VISIBLE_DEVICES. Throws
// when MASTER_ADDR/MASTER_PORT are not set or the local rank has no device.
std::vector<std::pair<std::string, std::string>> rank_environment(const RankInfo& rank, const ShimArgs& args,
                                                                  const GetEnv& getenv);

// "stratum-run: rank 1 (host node2, local rank 1) exited with status 3"
std::string rank_failure_line(const RankInfo& rank, const ShimArgs& args, int wait_status);
// "stratum-run: rank 1 (host node2, local rank 1) made no progress for 90 s ..."
std::string rank_hang_line(const RankInfo& rank, const ShimArgs& args);
// "[rank 1] "
std::string rank_prefix(const RankInfo& rank);

}  // namespace stratum::distributed::launch
