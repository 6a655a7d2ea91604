#pragma once
// stratum-run's flags as an Open MPI `mpirun` command line: one app context
// per host (`-np N --host NAME:N -x ... <stratum-run> --rank-shim ... -- PROGRAM`),
// built as an argv vector for execvp (no shell anywhere).
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "stratum/distributed/launch/resources.h"

namespace stratum::distributed::launch {

using EnvVar = std::pair<std::string, std::string>;

struct LaunchPlan {
  std::vector<SelectedHost> hosts;
  bool gpu = false;                      // set CUDA_VISIBLE_DEVICES per host
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<EnvVar> exports;           // user and pass-through variables (fixed ones are added)
  std::string mpirun = "mpirun";
  std::string launcher_agent;            // --mca plm_rsh_agent (ssh replacement); empty: Open MPI's default
  std::vector<std::string> launcher_args;  // extra mpirun arguments, verbatim
  std::string shim;                      // absolute path of stratum-run (same path on every host)
  std::string log_dir;
  bool prefix_output = true;
  int heartbeat_timeout_s = 0;           // the rank shims' --heartbeat_timeout (0: off)
  int grace_period_s = 1;                // Open MPI odls_base_sigkill_timeout: its pause before SIGTERM and again before SIGKILL
  std::vector<std::string> program;      // program and arguments
};

// Exported to every rank whatever the user says: NCCL_NVLS_ENABLE=0,
// TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1.
const std::vector<EnvVar>& fixed_rank_exports();

// `--export NAME[=VALUE]` specs: NAME alone takes this process's value (error if
// unset). Errors name the spec: an invalid name, MASTER_ADDR/PORT (use the
// flags), a fixed variable set to another value.
std::vector<EnvVar> parse_exports(const std::vector<std::string>& specs,
                                  const std::function<const char*(const char*)>& getenv);

// What every rank gets: `exports`, then the fixed variables, MASTER_ADDR and
// MASTER_PORT (each replacing an entry of its name). Both launchers pass this on.
std::vector<EnvVar> rank_exports(const std::vector<EnvVar>& exports, const std::string& master_addr, int master_port);

// Variables of `environ_entries` ("NAME=VALUE") that ranks on other hosts need,
// as DeepSpeed's launcher passes them: names starting NCCL_, UCX_, PYTHON, STRATUM_
// (the fixed variables excepted).
std::vector<EnvVar> passthrough_exports(const std::vector<std::string>& environ_entries);

// MASTER_ADDR when not given: 127.0.0.1 for a run on this machine only, else the
// first host's name (this machine's name, `this_host`, if that is "localhost").
std::string default_master_addr(const std::vector<SelectedHost>& hosts, const std::string& this_host);

// True for a name mpirun treats as this machine without any launch agent.
bool is_local_name(const std::string& host);

// The mpirun argv (argv[0] is plan.mpirun), host names kept as written
// (orte_keep_fqdn_hostnames). Throws stratum::Error for what mpirun cannot take
// (check_launch_host's hosts, an agent path with ':' or spaces).
std::vector<std::string> build_mpirun_argv(const LaunchPlan& plan);

// Variables mpirun itself needs: OMPI_ALLOW_RUN_AS_ROOT(+_CONFIRM)=1 when root.
std::vector<EnvVar> mpirun_environment(bool running_as_root);

// For display (--dry_run, messages): each word quoted when needed.
std::string format_command(const std::vector<std::string>& argv);

}  // namespace stratum::distributed::launch
