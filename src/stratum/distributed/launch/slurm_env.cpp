#include "stratum/distributed/launch/slurm_env.h"

#include <cstdlib>

#include "stratum/core/error.h"

namespace stratum::distributed::launch {
namespace {

int parse_count(const std::string& text, const std::string& what) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 9)
    throw Error(what + ": '" + text + "' is not a count");
  return std::stoi(text);
}

using GetEnv = std::function<const char*(const char*)>;

const char* env(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v && *v ? v : nullptr;
}

int env_count(const GetEnv& getenv, const char* name, int fallback) {
  const char* v = env(getenv, name);
  return v ? parse_count(v, std::string("environment variable ") + name) : fallback;
}

}  // namespace

std::vector<int> expand_tasks_per_node(const std::string& value, const std::string& what) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= value.size()) {
    const size_t comma = value.find(',', at);
    const std::string item = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const size_t paren = item.find("(x");
    if (paren == std::string::npos) {
      out.push_back(parse_count(item, what));
    } else {
      if (item.back() != ')') throw Error(what + ": '" + value + "' is not SLURM's tasks-per-node form, e.g. 2(x3),1");
      const int tasks = parse_count(item.substr(0, paren), what);
      const int repeat = parse_count(item.substr(paren + 2, item.size() - paren - 3), what);
      out.insert(out.end(), repeat, tasks);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

std::optional<SlurmTask> slurm_task_from_env() {
  return slurm_task_from_env([](const char* name) -> const char* { return std::getenv(name); });
}

std::optional<SlurmTask> slurm_task_from_env(const GetEnv& getenv) {
  // A task of an srun step; a batch script has SLURM_PROCID too, but no step.
  if (!env(getenv, "SLURM_PROCID") || !env(getenv, "SLURM_STEP_NUM_TASKS")) return std::nullopt;
  SlurmTask t;
  t.rank = env_count(getenv, "SLURM_PROCID", 0);
  t.local_rank = env_count(getenv, "SLURM_LOCALID", 0);
  t.world_size = env_count(getenv, "SLURM_STEP_NUM_TASKS", 1);
  t.node = env_count(getenv, "SLURM_NODEID", 0);
  const char* per_node = env(getenv, "SLURM_STEP_TASKS_PER_NODE");
  if (!per_node) per_node = env(getenv, "SLURM_TASKS_PER_NODE");
  if (per_node) {
    const auto counts = expand_tasks_per_node(per_node, "SLURM_STEP_TASKS_PER_NODE");
    if (t.node >= static_cast<int>(counts.size()))
      throw Error("SLURM_NODEID=" + std::to_string(t.node) + " but SLURM_STEP_TASKS_PER_NODE='" + per_node +
                  "' names " + std::to_string(counts.size()) + " nodes");
    t.local_world_size = counts[t.node];
  }
  if (t.rank >= t.world_size || t.local_rank >= t.local_world_size)
    throw Error("SLURM_PROCID=" + std::to_string(t.rank) + " / SLURM_LOCALID=" + std::to_string(t.local_rank) +
                " lie outside SLURM_STEP_NUM_TASKS=" + std::to_string(t.world_size) + " / " +
                std::to_string(t.local_world_size) + " tasks on this node");
  return t;
}

}  // namespace stratum::distributed::launch
