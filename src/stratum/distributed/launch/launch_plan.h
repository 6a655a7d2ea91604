#pragma once
// The checked flags as a plan for mpirun (one app context per host) or srun
// (one step), and the one-line summary stratum-run prints before starting it.
// Reads the hostfile, this machine's GPUs and PATH; torch-free.
#include <optional>

#include "stratum/distributed/launch/launch_request.h"
#include "stratum/distributed/launch/mpirun_command.h"
#include "stratum/distributed/launch/srun_command.h"

namespace stratum::distributed::launch {

// The hosts and slots (a hostfile, or this machine's GPUs or --num_procs CPU
// ranks), MASTER_ADDR, mpirun and the launch agent found in PATH. Throws
// stratum::Error naming the flag (--comment, --num_gpus past this machine's
// GPUs, a program not found when every host is this one, ...).
LaunchPlan make_mpirun_plan(const LaunchRequest& request, const RankSettings& settings);

// srun's rank count (-n): the hostfile's selected slots; else the per-node
// count times the nodes; else the allocation's (nullopt, left to srun); else,
// making a new allocation, this machine's GPU count or 2 CPU ranks per node.
std::optional<int> srun_task_count(const LaunchRequest& request);

// The srun step: counts, -w/-x host lists, MASTER_ADDR, srun found in PATH.
// Throws stratum::Error for mpirun's flags (--launcher_agent, --grace_period).
SrunPlan make_srun_plan(const LaunchRequest& request, const RankSettings& settings);

// "4 ranks on 2 hosts (GPU slots): node1 [0,1], node2 [0,1]; MASTER_ADDR=node1 MASTER_PORT=29500"
std::string describe_mpirun_plan(const LaunchPlan& plan);
// "8 ranks through srun, 4 per node, 2 nodes; MASTER_ADDR=... MASTER_PORT=..."
std::string describe_srun_plan(const SrunPlan& plan);

}  // namespace stratum::distributed::launch
