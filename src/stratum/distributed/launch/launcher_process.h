#pragma once
// Supervising mpirun or srun once started: its stderr relayed, the first rank
// a shim names remembered, signals forwarded, and the job's end in one line.
#include <optional>
#include <string>
#include <vector>

#include "stratum/distributed/launch/mpirun_command.h"

namespace stratum::distributed::launch {

// Runs `argv` (mpirun or srun, `name` in messages; `env` added to its
// environment; PR_SET_PDEATHSIG=SIGTERM so the job stops if stratum-run is
// killed outright), relays its stderr, forwards SIGINT/SIGTERM/SIGHUP/SIGUSR1/
// SIGUSR2 (not a terminal's ^C, which it gets itself) and returns stratum-run's
// exit status: 0; after `stratum-run: job stopped by SIGTERM (...)` 128 +
// signal; after `stratum-run: job failed: <the first rank a shim named>
// (mpirun exited with status S)` its status (1 if that was 0). Throws
// stratum::Error when it cannot start.
int run_launcher_process(const std::vector<std::string>& argv, const std::string& name,
                         const std::vector<EnvVar>& env);

// How one run of mpirun/srun ended, for the caller to report (--max_restarts).
struct LauncherOutcome {
  int exit_code = 0;                       // what stratum-run exits with for it (0, 128 + signal, the status)
  std::optional<int> stop_signal;          // stratum-run was told to stop (SIGINT/SIGTERM/SIGHUP): never restarted
  std::optional<std::string> failed_rank;  // the first rank a shim named: "rank 1 (host h, local rank 1) exited ..."
  std::string result;                      // "mpirun exited with status 137"
  // "rank 1 (host h, local rank 1) killed by signal 9 (SIGKILL) (mpirun exited with status 137)"
  std::string failure() const { return failed_rank ? *failed_rank + " (" + result + ")" : result; }
};
// run_launcher_process without its last line: supervises the job and says how it ended.
LauncherOutcome supervise_launcher_process(const std::vector<std::string>& argv, const std::string& name,
                                           const std::vector<EnvVar>& env);

}  // namespace stratum::distributed::launch
