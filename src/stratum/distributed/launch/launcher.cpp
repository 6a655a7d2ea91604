#include "stratum/distributed/launch/launcher.h"

#include <stdlib.h>
#include <unistd.h>

#include <iostream>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/launch_plan.h"
#include "stratum/distributed/launch/launcher_process.h"
#include "stratum/distributed/launch/process.h"

namespace stratum::distributed::launch {

int run_launcher(const LaunchRequest& f) {
  // Ranks' stdout is a pty (mpirun's, or the shim's under srun) whatever the user's is: tell them what the user sees
  // (progress bars redraw only on a real terminal). Passed on like every STRATUM_ variable.
  ::setenv("STRATUM_TERMINAL", ::isatty(STDOUT_FILENO) == 1 ? "1" : "0", /*overwrite=*/0);
  const auto launcher = launcher_name(f.launcher);
  if (!launcher) {
    say("error: --launcher '" + f.launcher + "': stratum-run supports mpirun (Open MPI, the default) and slurm "
        "(srun); DeepSpeed's pdsh, openmpi, mvapich, mpich, impi and jsrun launchers are not available");
    return kBadInput;
  }

  std::vector<std::string> command;
  std::vector<EnvVar> env;  // for mpirun/srun itself
  std::string summary;
  try {
    const RankSettings settings = rank_settings(f);
    if (*launcher == "slurm") {
      const SrunPlan plan = make_srun_plan(f, settings);
      command = build_srun_argv(plan);
      summary = describe_srun_plan(plan);
    } else {
      const LaunchPlan plan = make_mpirun_plan(f, settings);
      command = build_mpirun_argv(plan);
      env = mpirun_environment(geteuid() == 0);
      summary = describe_mpirun_plan(plan);
    }
  } catch (const Error& e) {
    say(std::string("error: ") + e.what());
    return kBadInput;
  }
  if (f.dry_run) {
    std::string prefix;
    for (const auto& [k, v] : env) prefix += k + "=" + v + " ";
    std::cout << prefix << format_command(command) << std::endl;
    return 0;
  }
  say(summary);
  try {
    return run_launcher_process(command, *launcher == "slurm" ? "srun" : "mpirun", env);
  } catch (const Error& e) {
    say(std::string("error: ") + e.what());
    return 1;
  }
}

}  // namespace stratum::distributed::launch
