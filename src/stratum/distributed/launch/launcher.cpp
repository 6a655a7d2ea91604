#include "stratum/distributed/launch/launcher.h"

#include <stdlib.h>
#include <unistd.h>

#include <iostream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/distributed/launch/launch_plan.h"
#include "stratum/distributed/launch/launcher_process.h"
#include "stratum/distributed/launch/process.h"

namespace stratum::distributed::launch {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// One attempt's mpirun or srun command (and the variables for it), planned from the flags.
struct PlannedJob {
  std::vector<std::string> command;
  std::vector<EnvVar> env;  // for mpirun/srun itself
  std::string summary;
};
PlannedJob plan_job(const LaunchRequest& f, const std::string& launcher) {
  PlannedJob job;
  const RankSettings settings = rank_settings(f);
  if (launcher == "slurm") {
    const SrunPlan plan = make_srun_plan(f, settings);
    job.command = build_srun_argv(plan);
    job.summary = describe_srun_plan(plan);
  } else {
    const LaunchPlan plan = make_mpirun_plan(f, settings);
    job.command = build_mpirun_argv(plan);
    job.env = mpirun_environment(geteuid() == 0);
    job.summary = describe_mpirun_plan(plan);
  }
  return job;
}

}  // namespace

RestartProgram restart_program(const std::vector<std::string>& program) {
  RestartProgram out;
  if (program.empty()) return out;
  // The program's own arguments end at a bare "--" (what follows is data for it).
  size_t end = program.size();
  for (size_t i = 1; i < program.size(); ++i)
    if (program[i] == "--") {
      end = i;
      break;
    }
  bool has_resume = false;
  std::vector<std::string> args = {program.front()};
  for (size_t i = 1; i < end; ++i) {
    const std::string& a = program[i];
    if ((a == "--save-dir" || a == "--save_dir") && i + 1 < end) {
      out.save_dir = program[i + 1];
    } else if (starts_with(a, "--save-dir=") || starts_with(a, "--save_dir=")) {
      out.save_dir = a.substr(a.find('=') + 1);
    }
    if (a == "--resume-tag" || a == "--resume_tag") {  // would go back to that tag: --resume goes to the latest
      ++i;
      continue;
    }
    if (starts_with(a, "--resume-tag=") || starts_with(a, "--resume_tag=")) continue;
    if (a == "--resume") has_resume = true;
    args.push_back(a);
  }
  out.resumes = !out.save_dir.empty();
  if (!out.resumes) {
    out.program = program;
    return out;
  }
  if (!has_resume) args.push_back("--resume");
  args.insert(args.end(), program.begin() + static_cast<std::ptrdiff_t>(end), program.end());
  out.program = std::move(args);
  return out;
}

std::string restart_line(const FailedAttempt& failed, int max_restarts, const RestartProgram& restart) {
  const std::string of = " of " + std::to_string(max_restarts + 1);
  return "attempt " + std::to_string(failed.attempt) + of + " failed: " + failed.failure + "; restarting (attempt " +
         std::to_string(failed.attempt + 1) + of + ") " +
         (restart.resumes ? "from the latest checkpoint in " + restart.save_dir
                          : std::string("from scratch (the program has no --save-dir)"));
}

std::optional<std::string> failed_host(const std::string& failure) {
  const std::string open = " (host ", close = ", local rank ";
  if (!starts_with(failure, "rank ")) return std::nullopt;
  const size_t at = failure.find(open);
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + open.size(), end = failure.find(close, from);
  if (end == std::string::npos || end == from) return std::nullopt;
  return failure.substr(from, end - from);
}

std::string exclude_host(const std::string& exclude, const std::string& host) {
  size_t start = 0;
  while (start <= exclude.size() && !exclude.empty()) {
    const size_t at = exclude.find('@', start);
    if (exclude.substr(start, at == std::string::npos ? std::string::npos : at - start) == host) return exclude;
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return exclude.empty() ? host : exclude + "@" + host;
}

std::string exclude_failed_hosts_problem(const LaunchRequest& f) {
  if (launcher_name(f.launcher).value_or("") != "mpirun")
    return "--exclude_failed_hosts is for mpirun launches (under SLURM, srun's own --exclude and requeueing apply)";
  if (f.hostfile.empty()) return "--exclude_failed_hosts needs --hostfile: the hosts to run on without the failed one";
  if (!f.include.empty()) return "--exclude_failed_hosts cannot be used with --include (it adds to --exclude)";
  if (f.num_nodes || f.num_gpus || f.num_procs)
    return "--exclude_failed_hosts cannot be used with --num_nodes, --num_gpus or --num_procs (--exclude, which it "
           "adds to, takes the hostfile's slots)";
  return "";
}

std::string restarts_spent_line(const std::vector<FailedAttempt>& attempts, int max_restarts) {
  std::string out = "job failed after " + std::to_string(attempts.size()) +
                    (attempts.size() == 1 ? " attempt" : " attempts") + " (--max_restarts " +
                    std::to_string(max_restarts) + "):";
  for (size_t i = 0; i < attempts.size(); ++i)
    out += std::string(i ? ";" : "") + " attempt " + std::to_string(attempts[i].attempt) + ": " + attempts[i].failure;
  return out;
}

namespace {

// STRATUM_FLIGHT_DIR for the ranks (passed on like every STRATUM_ variable):
// where each writes its flight-recorder file and the shims and timed-out
// ranks read them for the hang report (flight_report.h). `<--log_dir>/flight`,
// kept; else a temporary directory of this host, removed when the launcher
// ends (on other hosts the ranks create the same path, left there). A value
// already set is the user's and is kept.
class FlightDirectory {
 public:
  explicit FlightDirectory(const LaunchRequest& f) {
    if (f.dry_run || ::getenv("STRATUM_FLIGHT_DIR")) return;
    try {
      if (!f.log_dir.empty()) {
        dir_ = fs::absolute_path(f.log_dir) + "/flight";
      } else {
        dir_ = fs::make_temp_directory("stratum-flight-");
        temporary_ = true;
      }
      ::setenv("STRATUM_FLIGHT_DIR", dir_.c_str(), 1);
      set_ = true;
    } catch (const Error& e) {
      say(std::string("warning: no flight-recorder directory (") + e.what() + "): a hang is reported without it");
    }
  }
  ~FlightDirectory() {
    if (set_) ::unsetenv("STRATUM_FLIGHT_DIR");
    if (temporary_) fs::remove_tree(dir_);
  }
  FlightDirectory(const FlightDirectory&) = delete;
  FlightDirectory& operator=(const FlightDirectory&) = delete;

 private:
  std::string dir_;
  bool temporary_ = false, set_ = false;
};

}  // namespace

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
  if (f.max_restarts < 0 || f.max_restarts > kMaxRestarts) {
    say("error: --max_restarts must be 0.." + std::to_string(kMaxRestarts) + ", got " + std::to_string(f.max_restarts));
    return kBadInput;
  }
  if (f.exclude_failed_hosts) {
    if (const std::string why = exclude_failed_hosts_problem(f); !why.empty()) {
      say("error: " + why);
      return kBadInput;
    }
  }
  // Set before planning: rank_settings passes every STRATUM_ variable on to the ranks.
  if (f.max_restarts > 0) ::setenv(kRestartCountVariable, "0", 1);
  const FlightDirectory flight(f);

  PlannedJob job;
  try {
    job = plan_job(f, *launcher);
  } catch (const Error& e) {
    say(std::string("error: ") + e.what());
    return kBadInput;
  }
  if (f.dry_run) {
    std::string prefix;
    for (const auto& [k, v] : job.env) prefix += k + "=" + v + " ";
    std::cout << prefix << format_command(job.command) << std::endl;
    return 0;
  }
  say(job.summary);
  const RestartProgram restart = restart_program(f.program);
  if (f.max_restarts > 0 && !restart.resumes)
    say("--max_restarts " + std::to_string(f.max_restarts) +
        ": the program has no --save-dir, so a restart runs it from scratch");
  const std::string name = *launcher == "slurm" ? "srun" : "mpirun";
  std::vector<FailedAttempt> failed;
  std::string excluded = f.exclude;
  for (int attempt = 0;; ++attempt) {
    LauncherOutcome outcome;
    try {
      outcome = supervise_launcher_process(job.command, name, job.env);
    } catch (const Error& e) {
      say(std::string("error: ") + e.what());
      return 1;
    }
    if (outcome.stop_signal) {
      say("job stopped by " + signal_name(*outcome.stop_signal) + " (" + outcome.result + ")");
      return outcome.exit_code;
    }
    if (outcome.exit_code == 0) return 0;
    if (f.max_restarts == 0) {
      say("job failed: " + outcome.failure());
      return outcome.exit_code;
    }
    failed.push_back({attempt + 1, outcome.failure()});
    if (attempt >= f.max_restarts) {
      say(restarts_spent_line(failed, f.max_restarts));
      return outcome.exit_code;
    }
    say(restart_line(failed.back(), f.max_restarts, restart));
    ::setenv(kRestartCountVariable, std::to_string(attempt + 1).c_str(), 1);
    LaunchRequest again = f;
    again.program = restart.program;
    if (f.exclude_failed_hosts) {
      if (const auto host = failed_host(outcome.failure())) {
        excluded = exclude_host(excluded, *host);
        say("--exclude_failed_hosts: attempt " + std::to_string(attempt + 2) + " runs without host " + *host +
            " (--exclude " + excluded + ")");
      } else {
        say("--exclude_failed_hosts: no rank was named; attempt " + std::to_string(attempt + 2) +
            " runs on the same hosts");
      }
      again.exclude = excluded;
    }
    try {
      job = plan_job(again, *launcher);
      if (f.exclude_failed_hosts) say(job.summary);
    } catch (const Error& e) {
      say(std::string("error: restarting: ") + e.what());
      return 1;
    }
  }
}

}  // namespace stratum::distributed::launch
