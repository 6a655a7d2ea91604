#pragma once
// stratum-run --launcher slurm: the flags as one SLURM `srun` command line, as
// DeepSpeed's SlurmRunner builds it (-n, -N, -w/-x, --gpus-per-node, --comment,
// --export=ALL,...), with every task started through the rank shim
// (`<stratum-run> --rank-shim --slurm ... -- PROGRAM`); an argv vector for
// execvp, no shell. Torch-free.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "stratum/distributed/launch/mpirun_command.h"

namespace stratum::distributed::launch {

struct SrunPlan {
  std::string srun = "srun";
  std::optional<int> tasks;           // -n; unset: srun's own count (the allocation's)
  std::optional<int> tasks_per_node;  // --ntasks-per-node (--num_gpus / --num_procs)
  std::optional<int> nodes;           // -N (--num_nodes)
  std::optional<int> gpus_per_node;   // --gpus-per-node (--num_gpus): each task sees its node's GPUs
  std::vector<std::string> nodelist;  // -w (--include): host names or SLURM hostlists
  std::vector<std::string> exclude;   // -x (--exclude)
  std::string comment;                // --comment (DeepSpeed's flag)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<EnvVar> exports;             // user and pass-through variables (fixed ones are added)
  std::vector<std::string> launcher_args;  // extra srun arguments, verbatim, after stratum-run's own
  std::string shim;                        // absolute path of stratum-run (same path on every node)
  std::string log_dir;
  bool prefix_output = true;
  int heartbeat_timeout_s = 0;
  std::vector<std::string> program;  // program and arguments
};

// DeepSpeed's --include / --exclude ("node1@node2") as srun host lists; an item
// may be a SLURM hostlist ("node[01-04]"). Throws naming `flag` for a slot
// selection ("node1:0,2": srun places tasks on whole nodes), an empty item, or
// a name that is not a host name.
std::vector<std::string> srun_host_list(const std::string& spec, const std::string& flag);

// MASTER_ADDR under srun when --master_addr is not given: the first host of
// `nodelist` (-w), else, inside an allocation (`job_nodelist`, SLURM_JOB_NODELIST,
// not null), its first host not in `exclude`, else `this_host`. Rank 0 runs on
// the step's first node.
std::string srun_master_addr(const std::vector<std::string>& nodelist, const std::vector<std::string>& exclude,
                             const char* job_nodelist, const std::string& this_host);

// The srun argv (argv[0] is plan.srun). Adds --mpi=pmix (Debian's Open MPI
// joins srun's world only through PMIx) unless launcher_args name --mpi, and
// --kill-on-bad-exit=1 and --quit-on-interrupt so that a failed task or one
// SIGINT ends the step, as under mpirun. Throws stratum::Error for what srun
// cannot carry: a ',' in an exported value (srun splits --export there).
std::vector<std::string> build_srun_argv(const SrunPlan& plan);

}  // namespace stratum::distributed::launch
