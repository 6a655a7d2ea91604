#include "stratum/distributed/launch/srun_command.h"

#include <algorithm>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/rank_shim.h"

namespace stratum::distributed::launch {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// Splits at `sep` outside brackets: "a[1,2],b" -> "a[1,2]", "b".
std::vector<std::string> split_outside_brackets(const std::string& text, char sep, const std::string& what) {
  std::vector<std::string> out(1);
  bool open = false;
  for (char c : text) {
    if (c == '[') {
      if (open) throw Error(what + ": '" + text + "' has a '[' inside brackets");
      open = true;
    } else if (c == ']') {
      if (!open) throw Error(what + ": '" + text + "' has a ']' without its '['");
      open = false;
    }
    if (c == sep && !open) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  if (open) throw Error(what + ": '" + text + "' has a '[' without its ']'");
  return out;
}

struct Range {
  unsigned long lo = 0, hi = 0;
  size_t width = 0;  // digits of lo as written: "01-03" keeps two
};

unsigned long parse_number(const std::string& s, const std::string& group, const std::string& what) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    throw Error(what + ": '[" + group + "]' is not a list of numbers and lo-hi ranges");
  return std::stoul(s);
}

std::vector<Range> parse_ranges(const std::string& group, const std::string& what) {
  std::vector<Range> out;
  for (const auto& item : split_outside_brackets(group, ',', what)) {
    const size_t dash = item.find('-');
    Range r;
    const std::string lo = item.substr(0, dash);
    r.lo = parse_number(lo, group, what);
    r.hi = dash == std::string::npos ? r.lo : parse_number(item.substr(dash + 1), group, what);
    r.width = lo.size();
    if (r.hi < r.lo) throw Error(what + ": range '" + item + "' in '[" + group + "]' runs backwards");
    out.push_back(r);
  }
  return out;
}

std::string padded(unsigned long n, size_t width) {
  std::string s = std::to_string(n);
  return s.size() < width ? std::string(width - s.size(), '0') + s : s;
}

// One item without top-level commas ("r[1-2]-n[01-02]"), appended to `out` until it holds max_hosts.
void expand_item(const std::string& item, size_t max_hosts, const std::string& what, std::vector<std::string>& out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    if (out.size() < max_hosts) out.push_back(item);
    return;
  }
  const size_t close = item.find(']', open);
  const std::string prefix = item.substr(0, open), rest = item.substr(close + 1);
  for (const Range& r : parse_ranges(item.substr(open + 1, close - open - 1), what))
    for (unsigned long n = r.lo; n <= r.hi && out.size() < max_hosts; ++n) {
      std::vector<std::string> tails;
      expand_item(rest, max_hosts - out.size(), what, tails);
      for (const auto& tail : tails) out.push_back(prefix + padded(n, r.width) + tail);
    }
}

bool has_mpi_option(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "--mpi" || a.rfind("--mpi=", 0) == 0; });
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist, size_t max_hosts, const std::string& what) {
  std::vector<std::string> out;
  for (const auto& item : split_outside_brackets(hostlist, ',', what)) {
    if (out.size() >= max_hosts) break;
    if (item.empty()) throw Error(what + ": '" + hostlist + "' has an empty host name");
    expand_item(item, max_hosts, what, out);
  }
  return out;
}

std::string first_slurm_host(const std::string& hostlist, const std::string& what) {
  const auto hosts = expand_slurm_hostlist(hostlist, 1, what);
  if (hosts.empty()) throw Error(what + ": '" + hostlist + "' names no host");
  return hosts.front();
}

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
    // Every name is checked; a hostlist is read only as far as the hostfile bound.
    for (const auto& host : expand_slurm_hostlist(item, kMaxHostfileLines, flag)) check_hostname(host, flag);
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
    std::vector<std::string> excluded;
    for (const auto& x : exclude)
      for (auto& h : expand_slurm_hostlist(x, kMaxHostfileLines, "--exclude")) excluded.push_back(std::move(h));
    for (const auto& host : expand_slurm_hostlist(job_nodelist, excluded.size() + 1, "SLURM_JOB_NODELIST"))
      if (std::find(excluded.begin(), excluded.end(), host) == excluded.end()) return host;
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
