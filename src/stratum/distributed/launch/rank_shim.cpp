#include "stratum/distributed/launch/rank_shim.h"

#include <charconv>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/process.h"
#include "stratum/distributed/launch/slurm_env.h"

namespace stratum::distributed::launch {
namespace {

std::optional<int> parse_int(const std::string& s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

constexpr const char* kColonPlaceholder = "<colon>";

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace

std::vector<std::string> shim_arguments(const ShimArgs& args) {
  std::vector<std::string> out = {kRankShimFlag};
  if (args.slurm) {
    out.push_back("--slurm");
  } else {
    out.insert(out.end(), {"--node", args.node, "--node_rank", std::to_string(args.node_rank)});
    if (args.devices) out.insert(out.end(), {"--devices", join(*args.devices, ",")});
  }
  if (!args.log_dir.empty()) out.insert(out.end(), {"--log_dir", args.log_dir});
  if (!args.prefix) out.push_back("--no_prefix");
  if (args.heartbeat_timeout_s > 0) out.insert(out.end(), {"--heartbeat_timeout", std::to_string(args.heartbeat_timeout_s)});
  // mpirun splits its command line at every ":" word (app contexts), srun too
  // (heterogeneous job components), so a ":"
  // among the program's arguments travels as a placeholder whose index is named.
  std::vector<std::string> colons;
  for (size_t i = 0; i < args.program.size(); ++i)
    if (args.program[i] == ":") colons.push_back(std::to_string(i));
  if (!colons.empty()) out.insert(out.end(), {"--colons", join(colons, ",")});
  out.push_back("--");
  for (const auto& a : args.program) out.push_back(a == ":" ? std::string(kColonPlaceholder) : a);
  return out;
}

ShimArgs parse_shim_arguments(const std::vector<std::string>& args) {
  ShimArgs out;
  bool have_node = false, have_placement = false;  // --node, or --node_rank / --devices
  std::vector<size_t> colons;
  size_t i = 0;
  auto value = [&](const std::string& flag) -> const std::string& {
    if (i + 1 >= args.size()) throw Error(std::string(kRankShimFlag) + ": " + flag + " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--slurm") {
      out.slurm = true;
    } else if (a == "--node") {
      out.node = value(a);
      check_hostname(out.node, std::string(kRankShimFlag) + " --node");
      have_node = true;
    } else if (a == "--node_rank") {
      const auto v = parse_int(value(a));
      if (!v || *v < 0) throw Error(std::string(kRankShimFlag) + ": --node_rank needs a whole number >= 0");
      out.node_rank = *v;
      have_placement = true;
    } else if (a == "--devices") {
      have_placement = true;
      std::vector<std::string> devices;
      const std::string& list = value(a);
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = list.find(',', start);
        devices.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      out.devices = std::move(devices);
    } else if (a == "--log_dir") {
      out.log_dir = value(a);
    } else if (a == "--colons") {
      const std::string& list = value(a);
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = list.find(',', start);
        const auto v = parse_int(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (!v || *v < 0) throw Error(std::string(kRankShimFlag) + ": bad --colons list '" + list + "'");
        colons.push_back(static_cast<size_t>(*v));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (a == "--heartbeat_timeout") {
      const auto v = parse_int(value(a));
      if (!v || *v < 0) throw Error(std::string(kRankShimFlag) + ": --heartbeat_timeout needs a whole number of seconds >= 0");
      out.heartbeat_timeout_s = *v;
    } else if (a == "--no_prefix") {
      out.prefix = false;
    } else {
      throw Error(std::string(kRankShimFlag) + ": unexpected argument '" + a +
                  "' (this mode is for the ranks stratum-run starts through mpirun or srun)");
    }
  }
  if (out.slurm && (have_node || have_placement))
    throw Error(std::string(kRankShimFlag) + ": --slurm takes the node, node rank and devices from srun; "
                "--node, --node_rank and --devices are for mpirun's ranks");
  if (!out.slurm && !have_node)
    throw Error(std::string(kRankShimFlag) + ": --node is required (or --slurm for a task of srun; this mode is for "
                "the ranks stratum-run starts)");
  out.program.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i, args.size())), args.end());
  if (out.program.empty()) throw Error(std::string(kRankShimFlag) + ": no program after '--'");
  for (size_t c : colons) {
    if (c >= out.program.size()) throw Error(std::string(kRankShimFlag) + ": --colons index past the arguments");
    out.program[c].assign(1, ':');
  }
  return out;
}

RankInfo rank_info_from_env(const GetEnv& getenv) {
  auto read = [&](const char* name) {
    const char* v = getenv(name);
    if (!v)
      throw Error(std::string(kRankShimFlag) + ": " + name +
                  " is not set; this mode runs under Open MPI's mpirun, started by stratum-run");
    const auto n = parse_int(v);
    if (!n || *n < 0) throw Error(std::string(kRankShimFlag) + ": " + name + "='" + v + "' is not a whole number");
    return *n;
  };
  RankInfo r;
  r.rank = read("OMPI_COMM_WORLD_RANK");
  r.world_size = read("OMPI_COMM_WORLD_SIZE");
  r.local_rank = read("OMPI_COMM_WORLD_LOCAL_RANK");
  r.local_world_size = read("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (r.rank >= r.world_size || r.local_rank >= r.local_world_size)
    throw Error(std::string(kRankShimFlag) + ": inconsistent Open MPI rank variables");
  return r;
}

RankInfo shim_rank_info(ShimArgs& args, const GetEnv& getenv, const std::string& this_host) {
  if (!args.slurm) return rank_info_from_env(getenv);
  const auto task = slurm_task_from_env(getenv);
  if (!task)
    throw Error(std::string(kRankShimFlag) + " --slurm: SLURM_PROCID or SLURM_STEP_NUM_TASKS is not set; this mode "
                "runs as a task of srun, started by stratum-run --launcher slurm");
  const char* node = getenv("SLURMD_NODENAME");
  args.node = node && is_valid_hostname(node) ? node : this_host;
  args.node_rank = task->node;
  return {task->rank, task->world_size, task->local_rank, task->local_world_size};
}

std::vector<std::pair<std::string, std::string>> rank_environment(const RankInfo& rank, const ShimArgs& args,
                                                                  const GetEnv& getenv) {
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT"})
    if (!getenv(name) || !*getenv(name))
      throw Error(std::string(kRankShimFlag) + ": " + name + " is not set (stratum-run exports it to every rank)");
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", std::to_string(rank.rank)},
      {"LOCAL_RANK", std::to_string(rank.local_rank)},
      {"WORLD_SIZE", std::to_string(rank.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(rank.local_world_size)},
      {"NODE_RANK", std::to_string(args.node_rank)},
  };
  // Lines already get "[rank N] " from the shim; Stratum's logger can leave its own out.
  if (args.prefix) env.emplace_back("STRATUM_OUTPUT_PREFIXED", "1");
  if (args.devices) {
    if (rank.local_rank >= static_cast<int>(args.devices->size()))
      throw Error("rank " + std::to_string(rank.rank) + " on host " + args.node + " has local rank " +
                  std::to_string(rank.local_rank) + " but only " + std::to_string(args.devices->size()) +
                  " devices were chosen there (two hostfile names for one machine?)");
    env.emplace_back("CUDA_VISIBLE_DEVICES", join(*args.devices, ","));
  }
  return env;
}

std::string rank_failure_line(const RankInfo& rank, const ShimArgs& args, int wait_status) {
  return "stratum-run: rank " + std::to_string(rank.rank) + " (host " + args.node + ", local rank " +
         std::to_string(rank.local_rank) + ") " + describe_wait_status(wait_status);
}

std::string rank_hang_line(const RankInfo& rank, const ShimArgs& args) {
  return "stratum-run: rank " + std::to_string(rank.rank) + " (host " + args.node + ", local rank " +
         std::to_string(rank.local_rank) + ") made no progress for " + std::to_string(args.heartbeat_timeout_s) +
         " s (stuck in its own work, not waiting on a peer): killed it (--heartbeat_timeout; 0 turns the check off)";
}

std::string rank_prefix(const RankInfo& rank) { return "[rank " + std::to_string(rank.rank) + "] "; }

}  // namespace stratum::distributed::launch
