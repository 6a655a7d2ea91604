// A one-rank job that trains two steps and saves "global_step2" into argv[1],
// stalling before the save publishes (it marks the moment with "stalled.0" in
// the staging directory): the checkpoint test kills it there.
#include <unistd.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt_trainer.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/distributed/init.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto ctx = stratum::distributed::init();
  {
    stratum::test::Trainer t(2, ctx.cpu_world);
    t.train_step(0);
    t.train_step(1);
    stratum::CheckpointSaveOptions stall;
    stall.before_publish = [](const std::string& staging_dir) {
      std::ofstream(staging_dir + "/stalled.0") << "1";
      ::sleep(60);  // the test kills the job while it waits here
    };
    stratum::save_checkpoint(t.engine->core(), argv[1], "global_step2", {{"marker", "second"}}, stall);
  }
  ctx.cpu_world.reset();
  stratum::distributed::finalize();
  return 0;
}
