#include "stratum/distributed/launch/srun_command.h"

#include <algorithm>
#include <set>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/rank_shim.h"
#include "stratum/distributed/launch/slurm_hostlist.h"

namespace stratum::distributed::launch {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

bool has_mpi_option(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "--mpi" || a.rfind("--mpi=", 0) == 0; });
}

}  // namespace

std::vector<std::string> srun_host_list(const std::string& spec, const std::string& flag) {
  std::vector<std::string> out;
  if (spec.empty()) return out;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t sep = spec.find('@', at);
    const std::string item = spec.substr(at, sep == std::string::npos ? std::string::npos : sep - at);
    if (item.empty()) throw Error(flag + " '" + spec + "': an empty host between '@'s");
    if (item.find(':') != std::string::npos)
      throw Error(flag + " '" + item + "': srun places tasks on whole nodes, so slot lists (host:0,2) cannot be "
                  "passed to it; name whole hosts (host1@host2), or use --launcher mpirun with a hostfile");
    // Every name is checked, however long the list: each reaches srun's arguments.
    for_each_slurm_host(item, flag, [&](const std::string& host) {
      check_hostname(host, flag);
      return true;
    });
    out.push_back(item);
    if (sep == std::string::npos) break;
    at = sep + 1;
  }
  return out;
}

std::string srun_master_addr(const std::vector<std::string>& nodelist, const std::vector<std::string>& exclude,
                             const char* job_nodelist, const std::string& this_host) {
  if (!nodelist.empty()) return first_slurm_host(nodelist.front(), "--include");
  if (job_nodelist && *job_nodelist) {
    std::set<std::string> excluded;
    for (const auto& x : exclude)
      for (auto& h : expand_slurm_hostlist(x, "--exclude")) excluded.insert(std::move(h));
    std::string master;
    for_each_slurm_host(job_nodelist, "SLURM_JOB_NODELIST", [&](const std::string& host) {
      if (excluded.count(host)) return true;
      master = host;
      return false;
    });
    if (!master.empty()) {
      check_hostname(master, "SLURM_JOB_NODELIST");
      return master;
    }
  }
  return this_host;
}

std::vector<std::string> build_srun_argv(const SrunPlan& plan) {
  if (plan.program.empty()) throw Error("no program given: stratum-run [flags] PROGRAM [ARGS...]");
  if (plan.shim.empty() || plan.shim.front() != '/') throw Error("internal: the shim path must be absolute");

  std::vector<std::string> argv = {plan.srun};
  if (plan.tasks) argv.insert(argv.end(), {"-n", std::to_string(*plan.tasks)});
  if (plan.tasks_per_node) argv.push_back("--ntasks-per-node=" + std::to_string(*plan.tasks_per_node));
  if (plan.nodes) argv.insert(argv.end(), {"-N", std::to_string(*plan.nodes)});
  if (!plan.nodelist.empty()) argv.insert(argv.end(), {"-w", join(plan.nodelist, ",")});
  if (!plan.exclude.empty()) argv.insert(argv.end(), {"-x", join(plan.exclude, ",")});
  if (plan.gpus_per_node) argv.push_back("--gpus-per-node=" + std::to_string(*plan.gpus_per_node));
  if (!plan.comment.empty()) argv.insert(argv.end(), {"--comment", plan.comment});
  if (!has_mpi_option(plan.launcher_args)) argv.push_back("--mpi=pmix");
  argv.insert(argv.end(), {"--kill-on-bad-exit=1", "--quit-on-interrupt"});

  std::string exports = "--export=ALL";
  for (const auto& [k, v] : rank_exports(plan.exports, plan.master_addr, plan.master_port)) {
    if (v.find(',') != std::string::npos)
      throw Error("--export " + k + "=" + v + ": srun's --export list is split at ',', so a value with a ',' cannot "
                  "reach the ranks that way; set " + k + " in the environment of stratum-run instead (srun passes "
                  "its whole environment on)");
    exports += "," + k + "=" + v;
  }
  argv.push_back(exports);
  // After stratum-run's own options, so that the user's win (srun takes the last of each).
  argv.insert(argv.end(), plan.launcher_args.begin(), plan.launcher_args.end());

  ShimArgs shim;
  shim.slurm = true;
  shim.log_dir = plan.log_dir;
  shim.prefix = plan.prefix_output;
  shim.heartbeat_timeout_s = plan.heartbeat_timeout_s;
  shim.program = plan.program;
  argv.push_back(plan.shim);
  const auto shim_args = shim_arguments(shim);
  argv.insert(argv.end(), shim_args.begin(), shim_args.end());
  return argv;
}

}  // namespace stratum::distributed::launch
