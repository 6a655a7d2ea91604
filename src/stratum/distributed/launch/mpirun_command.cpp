#include "stratum/distributed/launch/mpirun_command.h"

#include <algorithm>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/rank_shim.h"

namespace stratum::distributed::launch {
namespace {

bool valid_env_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Later entries replace earlier ones of the same name; order of first appearance kept.
void put(std::vector<EnvVar>& env, const std::string& name, const std::string& value) {
  for (auto& [k, v] : env)
    if (k == name) {
      v = value;
      return;
    }
  env.emplace_back(name, value);
}

}  // namespace

const std::vector<EnvVar>& fixed_rank_exports() {
  static const std::vector<EnvVar> fixed = {
      {"NCCL_NVLS_ENABLE", "0"},
      {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
      {"NVSHMEM_DISABLE_NVLS", "1"},
  };
  return fixed;
}

std::vector<EnvVar> parse_exports(const std::vector<std::string>& specs,
                                  const std::function<const char*(const char*)>& getenv) {
  std::vector<EnvVar> out;
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    const std::string name = spec.substr(0, eq);
    if (!valid_env_name(name))
      throw Error("--export '" + spec + "': '" + name +
                  "' is not a variable name (letters, digits and '_', not starting with a digit)");
    if (name == "MASTER_ADDR" || name == "MASTER_PORT")
      throw Error("--export " + name + ": use --" + (name == "MASTER_ADDR" ? "master_addr" : "master_port") +
                  " instead");
    std::string value;
    if (eq == std::string::npos) {
      const char* v = getenv(name.c_str());
      if (!v) throw Error("--export " + name + ": " + name + " is not set here; give a value with --export " + name + "=VALUE");
      value = v;
    } else {
      value = spec.substr(eq + 1);
    }
    for (const auto& [fixed_name, fixed_value] : fixed_rank_exports())
      if (name == fixed_name && value != fixed_value)
        throw Error("--export " + name + "=" + value + ": stratum-run always sets " + fixed_name + "=" + fixed_value +
                    " (NVLink multicast stays off)");
    put(out, name, value);
  }
  return out;
}

std::vector<EnvVar> passthrough_exports(const std::vector<std::string>& environ_entries) {
  static const char* prefixes[] = {"NCCL_", "UCX_", "PYTHON", "STRATUM_"};
  std::vector<EnvVar> out;
  for (const auto& entry : environ_entries) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    if (!valid_env_name(name)) continue;
    const bool wanted = std::any_of(std::begin(prefixes), std::end(prefixes),
                                    [&](const char* p) { return name.rfind(p, 0) == 0; });
    const bool fixed = std::any_of(fixed_rank_exports().begin(), fixed_rank_exports().end(),
                                   [&](const EnvVar& f) { return f.first == name; });
    if (wanted && !fixed) put(out, name, entry.substr(eq + 1));
  }
  return out;
}

std::vector<EnvVar> rank_exports(const std::vector<EnvVar>& exports, const std::string& master_addr, int master_port) {
  std::vector<EnvVar> env = exports;
  for (const auto& [k, v] : fixed_rank_exports()) put(env, k, v);
  put(env, "MASTER_ADDR", master_addr);
  put(env, "MASTER_PORT", std::to_string(master_port));
  return env;
}

bool is_local_name(const std::string& host) { return host == "localhost"; }

std::string default_master_addr(const std::vector<SelectedHost>& hosts, const std::string& this_host) {
  if (hosts.empty()) return "127.0.0.1";
  const std::string& first = hosts.front().name;
  if (!is_local_name(first)) return first;
  return hosts.size() == 1 ? "127.0.0.1" : this_host;
}

std::vector<std::string> build_mpirun_argv(const LaunchPlan& plan) {
  if (plan.hosts.empty()) throw Error("no hosts to launch on");
  if (plan.program.empty()) throw Error("no program given: stratum-run [flags] PROGRAM [ARGS...]");
  if (plan.shim.empty() || plan.shim.front() != '/') throw Error("internal: the shim path must be absolute");
  if (plan.launcher_agent.find_first_of(": \t\n") != std::string::npos)
    throw Error("--launcher_agent '" + plan.launcher_agent +
                "': Open MPI splits the agent at ':' and spaces; give a path without them");

  std::vector<std::string> argv = {plan.mpirun, "--bind-to", "none"};
  if (!plan.gpu) argv.push_back("--oversubscribe");  // CPU ranks may outnumber cores
  argv.insert(argv.end(), {"--mca", "orte_abort_on_non_zero_status", "1"});
  // Open MPI cuts host names at the first '.' (node-b.example.com -> node-b,
  // 999.999.999.999 -> 999) unless told to keep them as written.
  argv.insert(argv.end(), {"--mca", "orte_keep_fqdn_hostnames", "1"});
  argv.insert(argv.end(), {"--mca", "odls_base_sigkill_timeout", std::to_string(std::max(plan.grace_period_s, 1))});
  if (!plan.launcher_agent.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", plan.launcher_agent});
  argv.insert(argv.end(), plan.launcher_args.begin(), plan.launcher_args.end());

  // Every app context gets the same exports (mpirun's -x is per context).
  const std::vector<EnvVar> env = rank_exports(plan.exports, plan.master_addr, plan.master_port);

  for (size_t i = 0; i < plan.hosts.size(); ++i) {
    const auto& host = plan.hosts[i];
    check_launch_host(host.name, "host");
    const std::string n = std::to_string(host.slots.size());
    if (i > 0) argv.push_back(":");
    argv.insert(argv.end(), {"-np", n, "--host", host.name + ":" + n});
    for (const auto& [k, v] : env) argv.insert(argv.end(), {"-x", k + "=" + v});
    ShimArgs shim;
    shim.node = host.name;
    shim.node_rank = static_cast<int>(i);
    if (plan.gpu) shim.devices = host.devices;
    shim.log_dir = plan.log_dir;
    shim.prefix = plan.prefix_output;
    shim.heartbeat_timeout_s = plan.heartbeat_timeout_s;
    shim.program = plan.program;
    argv.push_back(plan.shim);
    const auto shim_args = shim_arguments(shim);
    argv.insert(argv.end(), shim_args.begin(), shim_args.end());
  }
  return argv;
}

std::vector<EnvVar> mpirun_environment(bool running_as_root) {
  if (!running_as_root) return {};
  return {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
}

std::string format_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             std::string_view("-_./:=,@%+").find(c) != std::string_view::npos;
    });
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

}  // namespace stratum::distributed::launch
