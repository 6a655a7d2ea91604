// stratum-run: the launcher's command line. How it works (mpirun or srun, the
// rank shim, failures and signals) is told in
// src/stratum/distributed/launch/launcher.h; this file parses the flags.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "stratum/build_info.h"
#include "stratum/distributed/launch/launcher.h"
#include "stratum/distributed/launch/process.h"
#include "stratum/distributed/launch/rank_shim.h"
#include "stratum/distributed/launch/rank_shim_run.h"

namespace launch = stratum::distributed::launch;

namespace {

int launcher_main(int argc, char** argv) {
  CLI::App app{"Start one process per device (per CPU rank without GPUs) on one or many hosts, through Open MPI's "
               "mpirun or, with --launcher slurm, SLURM's srun, with DeepSpeed's launcher flags and hostfile.\n"
               "Every rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT "
               "(and CUDA_VISIBLE_DEVICES on mpirun's GPU launches); its output lines start with \"[rank N] \"."};
  app.set_version_flag("--version", std::string("stratum ") + STRATUM_VERSION + " (" + STRATUM_GIT_SHA + ")");
  app.prefix_command();
  app.footer(
      "PROGRAM [ARGS...] follows the flags ('--' may separate them) and is run as given, without a shell.\n"
      "Without --hostfile the job runs on this machine: one rank per GPU, or --num_procs CPU ranks (2 by default)\n"
      "where there is no GPU. A failing rank stops the job; stratum-run names it and exits non-zero (or, with\n"
      "--max_restarts N, starts it again from the latest checkpoint, N times at most).\n"
      "--launcher slurm runs one srun step (srun -n N [-N K] [-w/-x hosts] [--gpus-per-node=G] --mpi=pmix\n"
      "--kill-on-bad-exit=1 --export=ALL,...): inside an allocation (sbatch, salloc) it uses the allocation's tasks\n"
      "unless --num_gpus/--num_procs (per node) or --hostfile say how many; --include/--exclude name whole hosts.\n"
      "Examples:\n"
      "  stratum-run --num_gpus 4 ./train --config ds_config.json\n"
      "  stratum-run --hostfile hosts --include 'node1:0,2@node2' ./train --config ds_config.json\n"
      "  stratum-run --num_procs 4 ./train --config ds_config.json   # CPU ranks, MPI backend\n"
      "  stratum-run --num_gpus 8 --max_restarts 3 stratum-train --config ds_config.json --save-dir ckpt --save-every 100\n"
      "  stratum-run --launcher slurm --num_nodes 2 --num_gpus 8 ./train --config ds_config.json   # in an allocation");
  launch::LaunchRequest f;
  app.add_option("--launcher", f.launcher,
                 "mpirun (Open MPI, one app context per host) or slurm (one srun step, in or making an allocation)")
      ->capture_default_str();
  app.add_option("-H,--hostfile", f.hostfile, "DeepSpeed hostfile: lines 'hostname slots=N', '#' comments");
  app.add_option("-i,--include", f.include,
                 "Use only these hosts/slots, e.g. 'host1:0,2@host2' (slurm: whole hosts, srun -w)");
  app.add_option("-e,--exclude", f.exclude, "Leave out these hosts/slots, e.g. 'host1:0@host2' (slurm: srun -x)");
  app.add_option("--num_nodes", f.num_nodes, "Use the first K hosts (slurm: srun -N K)");
  app.add_option("--num_gpus", f.num_gpus,
                 "GPUs (ranks) per host: the first N slots (slurm: --ntasks-per-node and --gpus-per-node N)");
  app.add_option("--num_procs", f.num_procs,
                 "CPU ranks per host (GPU-less runs; default 2 on a machine without GPUs); no CUDA_VISIBLE_DEVICES");
  app.add_option("--master_addr", f.master_addr,
                 "MASTER_ADDR for every rank (default: 127.0.0.1, or the first host; slurm: the first host of -w or "
                 "of the allocation, else this host)");
  app.add_option("--master_port", f.master_port, "MASTER_PORT for every rank")->capture_default_str();
  app.add_option("--export", f.exports, "Export NAME (its value here) or NAME=VALUE to every rank; repeatable")
      ->allow_extra_args(false);  // one value per --export: the program follows
  app.add_option("--launcher_agent", f.launcher_agent,
                 "Program mpirun uses instead of ssh to reach other hosts (Open MPI's plm_rsh_agent)")
      ->envname("STRATUM_LAUNCHER_AGENT");
  app.add_option("--launcher_args", f.launcher_args, "Extra mpirun (or srun) arguments, split at spaces (no quoting)");
  app.add_option("--mpirun", f.mpirun, "The mpirun to use")->envname("STRATUM_MPIRUN")->capture_default_str();
  app.add_option("--srun", f.srun, "The srun to use (--launcher slurm)")
      ->envname("STRATUM_SRUN")
      ->capture_default_str();
  app.add_option("--comment", f.comment, "Passed to srun as --comment (--launcher slurm), as DeepSpeed does");
  app.add_option("--log_dir", f.log_dir, "Also write each rank's output to DIR/rank_<N>.log (on its host)");
  app.add_flag("--no_prefix", f.no_prefix, "Do not put \"[rank N] \" before output lines");
  app.add_option("--grace_period", f.grace_period,
                 "When the job is stopped, Open MPI sends SIGCONT, waits this long, SIGTERM, waits again, "
                 "then SIGKILL (its odls_base_sigkill_timeout; mpirun only)")
      ->capture_default_str();
  app.add_option("--heartbeat_timeout,--heartbeat-timeout", f.heartbeat_timeout,
                 "End the job when a training rank makes no progress for this many seconds, naming it (0: off). "
                 "Ranks waiting on a stuck peer keep beating; checked from a program's first training step")
      ->capture_default_str();
  app.add_option("--max_restarts,--max-restarts", f.max_restarts,
                 "When the job fails (a rank exits non-zero, is killed or hangs), end it and start it again, this many "
                 "times at most, with the program's --resume when it has --save-dir (from scratch without one); ranks "
                 "get STRATUM_RESTART_COUNT (0, 1, ...)")
      ->capture_default_str();
  app.add_flag("--exclude_failed_hosts,--exclude-failed-hosts", f.exclude_failed_hosts,
               "With --max_restarts and --hostfile (mpirun): a restart leaves out the host of the rank that failed, "
               "running on the hosts left at a smaller world");
  app.add_flag("--dry_run", f.dry_run, "Print the mpirun (or srun) command and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    launch::say(std::string("error: ") + e.what());
    return launch::kBadInput;
  }
  f.grace_period_given = app.count("--grace_period") > 0;
  f.program = app.remaining();
  if (!f.program.empty() && f.program.front() == "--") f.program.erase(f.program.begin());
  else if (!f.program.empty() && f.program.front().size() > 1 && f.program.front()[0] == '-') {
    launch::say("error: unknown flag '" + f.program.front() + "' (see --help; put the program after '--' if it starts with '-')");
    return launch::kBadInput;
  }
  return launch::run_launcher(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == launch::kRankShimFlag)
    return launch::run_rank_shim(std::vector<std::string>(argv + 2, argv + argc));
  return launcher_main(argc, argv);
}
