#include "stratum/distributed/launch/launch_plan.h"

#include <stdlib.h>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/process.h"

namespace stratum::distributed::launch {
namespace {

std::string describe_hosts(const std::vector<SelectedHost>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    out += (out.empty() ? "" : ", ") + h.name + " [";
    for (size_t i = 0; i < h.devices.size(); ++i) out += (i ? "," : "") + h.devices[i];
    out += "]";
  }
  return out;
}

}  // namespace

LaunchPlan make_mpirun_plan(const LaunchRequest& f, const RankSettings& s) {
  if (!f.comment.empty()) throw Error("--comment is passed to srun (--launcher slurm); mpirun has none");
  LaunchPlan plan;
  SelectionRequest request = selection_request(f);
  std::vector<PoolHost> pool;
  if (!f.hostfile.empty()) {
    pool = pool_from_hostfile(read_hostfile(f.hostfile));
    plan.gpu = !f.num_procs;
  } else {
    const auto gpus = detect_local_gpus();
    plan.gpu = !f.num_procs && !gpus.devices.empty();
    if (plan.gpu) {
      pool.push_back(make_pool_host("localhost", static_cast<int>(gpus.devices.size()), gpus.devices));
      if (f.num_gpus && *f.num_gpus > static_cast<int>(gpus.devices.size()))
        throw Error("--num_gpus " + std::to_string(*f.num_gpus) + ": this machine has " +
                    std::to_string(gpus.devices.size()) + " GPU" + (gpus.devices.size() == 1 ? "" : "s") + " (" +
                    gpus.source + ")");
    } else {
      if (f.num_gpus)
        throw Error("--num_gpus " + std::to_string(*f.num_gpus) + ": no GPUs found on this machine (" + gpus.source +
                    "); use --num_procs N for CPU ranks");
      pool.push_back(make_pool_host("localhost", f.num_procs.value_or(2)));
      request.per_node.reset();  // the pool holds just the --num_procs ranks
    }
  }
  plan.hosts = select_resources(pool, request);

  plan.master_addr = f.master_addr.empty() ? default_master_addr(plan.hosts, this_host_name()) : f.master_addr;
  check_hostname(plan.master_addr, "--master_addr");
  plan.master_port = s.master_port;
  plan.exports = s.exports;

  const auto mpirun = find_program(f.mpirun);
  if (!mpirun)
    throw Error("--mpirun '" + f.mpirun + "': not found (stratum-run needs Open MPI's mpirun; install it or "
                "pass its path)");
  plan.mpirun = *mpirun;
  if (!f.launcher_agent.empty()) {
    const auto agent = find_program(f.launcher_agent);
    if (!agent) throw Error("--launcher_agent '" + f.launcher_agent + "': not found or not executable");
    plan.launcher_agent = fs::absolute_path(*agent);
  }
  plan.launcher_args = s.launcher_args;
  plan.log_dir = s.log_dir;
  plan.prefix_output = s.prefix;
  if (f.grace_period < 1) throw Error("--grace_period must be at least 1 second");
  plan.grace_period_s = f.grace_period;
  plan.heartbeat_timeout_s = s.heartbeat_timeout_s;
  plan.shim = s.shim;
  plan.program = s.program;

  bool all_local = true;
  for (const auto& h : plan.hosts) all_local = all_local && is_local_name(h.name);
  if (all_local && !find_program(plan.program.front()))
    throw Error("program '" + plan.program.front() + "' not found" +
                (plan.program.front().find('/') == std::string::npos ? " in PATH" : "") + " or not executable");
  return plan;
}

std::optional<int> srun_task_count(const LaunchRequest& f) {
  const SelectionRequest request = selection_request(f);
  check_selection_request(request);
  if (!f.hostfile.empty()) {
    const auto pool = pool_from_hostfile(read_hostfile(f.hostfile));
    int ranks = 0;
    for (const auto& h : select_resources(pool, request)) ranks += static_cast<int>(h.slots.size());
    return ranks;
  }
  const int nodes = f.num_nodes.value_or(1);
  if (request.per_node) return *request.per_node * nodes;
  if (::getenv("SLURM_JOB_ID")) return std::nullopt;
  const auto gpus = detect_local_gpus();
  return (gpus.devices.empty() ? 2 : static_cast<int>(gpus.devices.size())) * nodes;
}

SrunPlan make_srun_plan(const LaunchRequest& f, const RankSettings& s) {
  const char* agent_env = ::getenv("STRATUM_LAUNCHER_AGENT");
  if (!f.launcher_agent.empty() && !(agent_env && f.launcher_agent == agent_env))
    throw Error("--launcher_agent is mpirun's (it replaces ssh); srun reaches the nodes through slurmd");
  if (f.grace_period_given)
    throw Error("--grace_period is Open MPI's; under srun a stopped step gets SIGKILL (SLURM's KillWait "
                "applies to cancelled jobs)");
  SrunPlan plan;
  const auto srun = find_program(f.srun);
  if (!srun)
    throw Error("--srun '" + f.srun + "': not found (--launcher slurm needs SLURM's srun: install SLURM's "
                "client commands, or pass its path with --srun or STRATUM_SRUN)");
  plan.srun = *srun;
  plan.tasks = srun_task_count(f);
  if (f.num_gpus || f.num_procs) plan.tasks_per_node = f.num_gpus ? f.num_gpus : f.num_procs;
  plan.nodes = f.num_nodes;
  plan.gpus_per_node = f.num_gpus;
  plan.nodelist = srun_host_list(f.include, "--include");
  plan.exclude = srun_host_list(f.exclude, "--exclude");
  plan.comment = f.comment;

  plan.master_addr = f.master_addr.empty()
                         ? srun_master_addr(plan.nodelist, plan.exclude, ::getenv("SLURM_JOB_NODELIST"), this_host_name())
                         : f.master_addr;
  check_hostname(plan.master_addr, "--master_addr");
  plan.master_port = s.master_port;
  // srun's --export list splits at ','. A value with one that this process
  // already holds reaches the ranks anyway: srun passes its environment on (ALL).
  for (const auto& [k, v] : s.exports) {
    const char* here = ::getenv(k.c_str());
    if (v.find(',') != std::string::npos && here && v == here) continue;
    plan.exports.emplace_back(k, v);
  }
  plan.launcher_args = s.launcher_args;
  plan.log_dir = s.log_dir;
  plan.prefix_output = s.prefix;
  plan.heartbeat_timeout_s = s.heartbeat_timeout_s;
  plan.shim = s.shim;
  plan.program = s.program;
  return plan;
}

std::string describe_mpirun_plan(const LaunchPlan& plan) {
  int ranks = 0;
  for (const auto& h : plan.hosts) ranks += static_cast<int>(h.slots.size());
  return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " on " + std::to_string(plan.hosts.size()) +
         (plan.hosts.size() == 1 ? " host" : " hosts") + (plan.gpu ? " (GPU slots): " : " (processes): ") +
         describe_hosts(plan.hosts) + "; MASTER_ADDR=" + plan.master_addr + " MASTER_PORT=" +
         std::to_string(plan.master_port);
}

std::string describe_srun_plan(const SrunPlan& plan) {
  std::string out = plan.tasks ? std::to_string(*plan.tasks) + (*plan.tasks == 1 ? " rank" : " ranks")
                               : std::string("the allocation's ranks");
  out += " through srun";
  if (plan.tasks_per_node) out += ", " + std::to_string(*plan.tasks_per_node) + " per node";
  if (plan.nodes) out += ", " + std::to_string(*plan.nodes) + (*plan.nodes == 1 ? " node" : " nodes");
  if (!plan.nodelist.empty()) out += ", on " + format_command(plan.nodelist);
  if (!plan.exclude.empty()) out += ", not on " + format_command(plan.exclude);
  return out + "; MASTER_ADDR=" + plan.master_addr + " MASTER_PORT=" + std::to_string(plan.master_port);
}

}  // namespace stratum::distributed::launch
