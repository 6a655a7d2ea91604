#pragma once
// stratum-run's flags as given (the app parses them with CLI11), and what they
// mean for every rank whichever launcher starts it. Torch-free.
#include <optional>
#include <string>
#include <vector>

#include "stratum/distributed/launch/mpirun_command.h"
#include "stratum/distributed/launch/resources.h"

namespace stratum::distributed::launch {

struct LaunchRequest {
  std::string hostfile, include, exclude, master_addr, launcher_agent, launcher_args, log_dir, comment;
  std::string launcher = "mpirun";  // --launcher as typed (launcher_name checks it)
  std::string mpirun = "mpirun";
  std::string srun = "srun";
  std::optional<int> num_nodes, num_gpus, num_procs;
  int master_port = 29500;
  int grace_period = 1;
  bool grace_period_given = false;  // --grace_period on the command line (srun refuses it)
  // 90 s: a rank stopped or stuck in its own work is killed, and the hang
  // report printed (flight_report.h), within 100 s of its last sign of life
  // (a flight file is at most 1 s old), while a healthy rank beats at least
  // every few seconds from its steps, collective waits and file writes. The
  // watch starts at the first training step, so start-up (loading, NCCL
  // init, a first step's allocations) is not held to it; the collective
  // timeout (10 min, communicator.h) covers that phase.
  int heartbeat_timeout = 90;
  int max_restarts = 0;  // --max_restarts: run the job again after a failure, this many times at most
  bool exclude_failed_hosts = false;  // --exclude_failed_hosts: a restart leaves out the failed rank's host
  std::vector<std::string> exports;  // --export specs, NAME or NAME=VALUE
  bool no_prefix = false, dry_run = false;
  std::vector<std::string> program;  // PROGRAM ARGS...
};

// `--launcher`, DeepSpeed's flag: "mpirun" or "slurm" (any case), lower-cased;
// nullopt for anything else.
std::optional<std::string> launcher_name(const std::string& value);

// What every rank gets, whichever launcher starts it.
struct RankSettings {
  std::vector<EnvVar> exports;
  int master_port = 29500;
  std::vector<std::string> launcher_args;
  std::string log_dir, shim;
  bool prefix = true;
  int heartbeat_timeout_s = 0;
  std::vector<std::string> program;
};

// Checks the flags every launcher shares (a program, counts in range, the
// port, --heartbeat_timeout), merges the pass-through variables of this
// environment with --export, splits --launcher_args at spaces and creates
// --log_dir. Throws stratum::Error naming the flag. Warns (on stderr) when
// NCCL_NVLS_ENABLE is set here, as ranks get 0.
RankSettings rank_settings(const LaunchRequest& request);

// --include/--exclude/--num_nodes and --num_gpus or --num_procs as a resource selection.
SelectionRequest selection_request(const LaunchRequest& request);

}  // namespace stratum::distributed::launch
