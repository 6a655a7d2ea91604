#pragma once
// What SLURM tells a task started by `srun`. Torch-free.
//
// srun sets SLURM_PROCID (the task's rank), SLURM_LOCALID (its rank on the
// node), SLURM_STEP_NUM_TASKS, SLURM_NODEID and SLURM_STEP_TASKS_PER_NODE (tasks on
// each node of the step, compressed: "2(x3),1" is 2,2,2,1).
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stratum::distributed::launch {

struct SlurmTask {
  int rank = 0, local_rank = 0, world_size = 1, local_world_size = 1, node = 0;
};

// The task's place from the environment; nullopt when not started by srun
// (SLURM_PROCID or SLURM_STEP_NUM_TASKS unset: a batch script has no step). Throws stratum::Error naming the variable when one is
// malformed or they disagree.
std::optional<SlurmTask> slurm_task_from_env();
// The same, reading variables through `getenv` (tests, the rank shim).
std::optional<SlurmTask> slurm_task_from_env(const std::function<const char*(const char*)>& getenv);

// "2(x3),1" -> {2, 2, 2, 1}. Throws stratum::Error naming `what` when malformed.
std::vector<int> expand_tasks_per_node(const std::string& value, const std::string& what);

}  // namespace stratum::distributed::launch
