#pragma once
// The rank shim's process loop (rank_shim.h has its pure parts): one shim per
// rank, started by mpirun or srun as `stratum-run --rank-shim ...`.
#include <string>
#include <vector>

namespace stratum::distributed::launch {

// Runs the shim for the arguments that follow `--rank-shim`: sets the rank's
// variables (rank_environment), forks the program into the shim's process
// group, relays its stdout (over a pty when ours is one, and always under srun)
// and stderr with "[rank N] " before each line (and into DIR/rank_N.log with
// --log_dir), forwards signals that mpirun/slurmstepd did not send to the whole
// group, kills the program when its heartbeat stops for --heartbeat_timeout,
// and when it fails prints rank_failure_line. Returns the exit status for the
// shim: the program's (128 + signal), 124 for a hang, 0 when it stopped because
// another rank failed, 2 (kBadInput) for bad arguments, 127 when it cannot start.
int run_rank_shim(const std::vector<std::string>& shim_args);

}  // namespace stratum::distributed::launch
