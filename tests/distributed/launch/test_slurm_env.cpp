// What srun's environment says about a task (launch/slurm_env.h).
#include <gtest/gtest.h>

#include <cstdlib>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/slurm_env.h"

namespace stratum::distributed::launch {
namespace {

TEST(SlurmEnv, TasksPerNodeExpandsSlurmsCompressedForm) {
  EXPECT_EQ(expand_tasks_per_node("2", "x"), (std::vector<int>{2}));
  EXPECT_EQ(expand_tasks_per_node("2(x3),1", "x"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4,8(x2)", "x"), (std::vector<int>{4, 8, 8}));
  for (const char* bad : {"", "two", "2(x", "2(3)", "2,,1"}) {
    try {
      expand_tasks_per_node(bad, "SLURM_STEP_TASKS_PER_NODE");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_STEP_TASKS_PER_NODE"), std::string::npos) << e.what();
    }
  }
}

TEST(SlurmEnv, TaskFromTheEnvironment) {
  for (const char* v : {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE"})
    ::unsetenv(v);
  EXPECT_FALSE(slurm_task_from_env().has_value());
  ::setenv("SLURM_PROCID", "5", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  ::setenv("SLURM_STEP_NUM_TASKS", "7", 1);
  ::setenv("SLURM_NODEID", "2", 1);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3),1", 1);
  auto t = slurm_task_from_env();
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 5);
  EXPECT_EQ(t->local_rank, 1);
  EXPECT_EQ(t->world_size, 7);
  EXPECT_EQ(t->local_world_size, 2);
  ::setenv("SLURM_NODEID", "4", 1);  // past the node list
  EXPECT_THROW(slurm_task_from_env(), Error);
  ::setenv("SLURM_NODEID", "3", 1);  // one task there, but local id 1
  EXPECT_THROW(slurm_task_from_env(), Error);
  for (const char* v : {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE"})
    ::unsetenv(v);
}

}  // namespace
}  // namespace stratum::distributed::launch
