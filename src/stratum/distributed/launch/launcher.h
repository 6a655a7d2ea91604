#pragma once
// stratum-run: the launcher. DeepSpeed's launcher flags and hostfile; the ranks
// run under Open MPI's mpirun (the MPI backend needs MPI_COMM_WORLD, the NCCL
// backend bootstraps over MPI), or with --launcher slurm as one SLURM srun step.
// Nothing goes through a shell: mpirun/srun and the program are exec'd from argv
// vectors.
//
//   stratum-run [--launcher mpirun|slurm] [--hostfile F] [--include S | --exclude S]
//               [--num_nodes K] [--num_gpus N | --num_procs N] [--master_addr A]
//               [--master_port P] [--export NAME[=VALUE]]... PROGRAM [ARGS...]
//
// How it works:
// - The flags become one mpirun app context per host: `-np N --host NAME:N
//   -x VAR=VALUE... <this program> --rank-shim --node NAME --node_rank I
//   [--devices 0,2] -- PROGRAM ARGS` (mpirun_command.h).
// - --launcher slurm makes them one srun command, as DeepSpeed's SlurmRunner:
//   `srun [-n N] [--ntasks-per-node=P] [-N K] [-w HOSTS] [-x HOSTS]
//   [--gpus-per-node=G] [--comment C] --mpi=pmix --kill-on-bad-exit=1
//   --quit-on-interrupt --export=ALL,VAR=VALUE... <this program> --rank-shim
//   --slurm -- PROGRAM ARGS` (srun_command.h). -n is the hostfile's
//   selected slots, or --num_gpus/--num_procs times --num_nodes; inside an
//   allocation without them, srun's own count. --include/--exclude name whole
//   hosts. Debian's Open MPI joins srun's world only through PMIx.
// - The shim (this program with --rank-shim, one per rank) sets RANK,
//   LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE (from OMPI_COMM_WORLD_*, or srun's
//   SLURM_PROCID etc.), NODE_RANK, CUDA_VISIBLE_DEVICES (mpirun's GPU launches:
//   the host's chosen slots; srun's tasks see their node's GPUs) and
//   STRATUM_OUTPUT_PREFIXED=1, then forks the program into the shim's process
//   group (mpirun signals that group, slurmstepd every process of the step, so
//   the program gets them directly; other senders' signals the shim forwards),
//   relays its stdout (over a pty when mpirun gave the shim one, and always
//   under srun, keeping the program line-buffered) and
//   stderr with "[rank N] " before each line (--log_dir also keeps unprefixed
//   copies in DIR/rank_N.log; --no_prefix passes output through), and when the
//   program fails prints `stratum-run: rank 1 (host node2, local rank 1) exited
//   with status 3` (or `killed by signal 9 (SIGKILL)`) and exits with that status
//   (128 + signal), upon which mpirun stops the other ranks (SIGCONT, wait,
//   SIGTERM, wait, SIGKILL; the wait is --grace_period), or srun kills the step.
//   A rank that was told to stop is not reported.
// - The launcher relays mpirun's (srun's) stderr, remembers the first rank a shim
//   named, forwards SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 to it (not a terminal's
//   ^C, which it gets itself; srun ends the step on SIGINT, SIGTERM and SIGHUP),
//   and ends with `stratum-run: job failed: <that rank's line> (mpirun exited with
//   status S)` (`srun exited ...`) and that status, or `job stopped by SIGTERM`
//   and 128 + signal. Bad input: `stratum-run: error: ...`, exit 2, before
//   mpirun/srun starts. mpirun/srun gets PR_SET_PDEATHSIG=SIGTERM, so the job
//   stops even if the launcher is killed outright.
// - --max_restarts N (torchrun's flag; 0 by default): a job that fails (a rank
//   exits non-zero, is killed, or hangs past --heartbeat_timeout) is ended as
//   above and started again, N times at most, each time after
//   `stratum-run: attempt 1 of 3 failed: <the rank's line> (mpirun exited with
//   status S); restarting (attempt 2 of 3) from the latest checkpoint in D`.
//   The restart runs restart_program(): with --save-dir D the program gets
//   --resume (stratum-train then continues from the newest checkpoint in D that
//   verifies); without one it starts from scratch, which stratum-run says at the
//   start. Every rank gets STRATUM_RESTART_COUNT (0, 1, ...; torchrun's
//   TORCHELASTIC_RESTART_COUNT). A job stopped by a signal is not restarted; when
//   the restarts are spent it ends with `stratum-run: job failed after 3 attempts
//   (--max_restarts 2): attempt 1: ...; attempt 2: ...; attempt 3: ...` and the
//   last attempt's status. With --exclude_failed_hosts (mpirun, a --hostfile,
//   no --include or counts) a restart leaves out the host of the rank that
//   failed (added to --exclude): the job runs again on the hosts left, at a
//   smaller world.
//
// Where: launch_request.h (the flags, checked), launch_plan.h (the mpirun or
// srun plan), launcher_process.h (supervising it), rank_shim.h and
// rank_shim_run.h (the shim); apps/stratum_run.cpp parses the flags.
#include <optional>

#include "stratum/distributed/launch/launch_request.h"

namespace stratum::distributed::launch {

// stratum-run after its flags are parsed: checks --launcher and the flags,
// builds the mpirun or srun plan, prints it (--dry_run: the command, on
// stdout) and runs it under run_launcher_process. Returns the exit status:
// kBadInput (2) after `stratum-run: error: ...` for bad input, before anything
// starts; 1 when mpirun/srun cannot start; else run_launcher_process's.
int run_launcher(const LaunchRequest& request);

// --max_restarts: the program a restart runs. With --save-dir DIR (or
// --save_dir, either as one word with '=') "--resume" is added unless it is
// there (before a bare "--", else at the end), and --resume-tag T, which would
// go back to T, becomes --resume; `resumes` is then true and `save_dir` DIR.
// Without --save-dir the program is unchanged (a restart starts from scratch).
struct RestartProgram {
  std::vector<std::string> program;
  bool resumes = false;
  std::string save_dir;
};
RestartProgram restart_program(const std::vector<std::string>& program);

// The variable every rank gets under --max_restarts: the attempt, from 0.
inline constexpr const char* kRestartCountVariable = "STRATUM_RESTART_COUNT";
inline constexpr int kMaxRestarts = 1000;

// One failed attempt, as stratum-run reports it; `attempt` counts from 1.
struct FailedAttempt {
  int attempt = 1;
  std::string failure;  // LauncherOutcome::failure()
};
// "attempt 1 of 3 failed: <failure>; restarting (attempt 2 of 3) from the latest checkpoint in DIR"
// (", from scratch (the program has no --save-dir)" without one).
std::string restart_line(const FailedAttempt& failed, int max_restarts, const RestartProgram& restart);
// --exclude_failed_hosts: the host a failure line names ("rank 3 (host node2,
// local rank 1) exited ..." -> node2); nullopt when it names none.
std::optional<std::string> failed_host(const std::string& failure);
// `exclude` (an --exclude value, "a@b:0") with `host` left out whole too.
std::string exclude_host(const std::string& exclude, const std::string& host);
// Why --exclude_failed_hosts cannot apply to these flags; empty when it can.
std::string exclude_failed_hosts_problem(const LaunchRequest& request);

// "job failed after 3 attempts (--max_restarts 2): attempt 1: ...; attempt 2: ...; attempt 3: ..."
std::string restarts_spent_line(const std::vector<FailedAttempt>& attempts, int max_restarts);

}  // namespace stratum::distributed::launch
