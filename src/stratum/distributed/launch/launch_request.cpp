#include "stratum/distributed/launch/launch_request.h"

#include <stdlib.h>

#include <cctype>
#include <sstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/process.h"

extern char** environ;

namespace stratum::distributed::launch {
namespace {

std::vector<std::string> environ_entries() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

// A count flag in 1..max: past the bound, slot lists would grow to gigabytes.
void check_count(const char* flag, const std::optional<int>& value, int max, const char* per) {
  if (!value) return;
  if (*value < 1) throw Error(std::string(flag) + " must be at least 1, got " + std::to_string(*value));
  if (*value > max)
    throw Error(std::string(flag) + " " + std::to_string(*value) + " is over the limit of " + std::to_string(max) + per);
}

}  // namespace

std::optional<std::string> launcher_name(const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "mpirun" || v == "slurm") return v;
  return std::nullopt;
}

RankSettings rank_settings(const LaunchRequest& f) {
  RankSettings s;
  if (f.program.empty()) throw Error("no program given: stratum-run [flags] PROGRAM [ARGS...]");
  if (f.num_gpus && f.num_procs) throw Error("--num_gpus and --num_procs cannot be used together");
  check_count("--num_gpus", f.num_gpus, kMaxSlotsPerHost, " per host");
  check_count("--num_procs", f.num_procs, kMaxSlotsPerHost, " per host");
  check_count("--num_nodes", f.num_nodes, kMaxHostfileLines, " hosts");
  if (f.master_port < 1 || f.master_port > 65535)
    throw Error("--master_port must be in 1..65535, got " + std::to_string(f.master_port));
  s.master_port = f.master_port;

  s.exports = passthrough_exports(environ_entries());
  for (const auto& [k, v] : parse_exports(f.exports, [](const char* name) -> const char* { return ::getenv(name); })) {
    bool replaced = false;
    for (auto& e : s.exports)
      if (e.first == k) e.second = v, replaced = true;
    if (!replaced) s.exports.emplace_back(k, v);
  }
  if (const char* nvls = ::getenv("NCCL_NVLS_ENABLE"); nvls && std::string(nvls) != "0")
    say("warning: NCCL_NVLS_ENABLE=" + std::string(nvls) + " in the environment is overridden: ranks get NCCL_NVLS_ENABLE=0");

  std::istringstream words(f.launcher_args);
  for (std::string w; words >> w;) s.launcher_args.push_back(w);
  if (!f.log_dir.empty()) {
    s.log_dir = fs::absolute_path(f.log_dir);
    fs::make_directories(s.log_dir);  // throws, naming the path
  }
  s.prefix = !f.no_prefix;
  if (f.heartbeat_timeout < 0 || f.heartbeat_timeout > 7 * 86400)
    throw Error("--heartbeat_timeout must be 0 (off) .. 604800 seconds, got " + std::to_string(f.heartbeat_timeout));
  s.heartbeat_timeout_s = f.heartbeat_timeout;
  s.shim = self_executable();
  s.program = f.program;
  return s;
}

SelectionRequest selection_request(const LaunchRequest& f) {
  SelectionRequest request;
  request.include = f.include;
  request.exclude = f.exclude;
  request.num_nodes = f.num_nodes;
  request.per_node = f.num_procs ? f.num_procs : f.num_gpus;
  request.per_node_flag = f.num_procs ? "--num_procs" : "--num_gpus";
  return request;
}

}  // namespace stratum::distributed::launch
