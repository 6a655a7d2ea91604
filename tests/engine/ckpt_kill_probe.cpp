// A one-rank job that trains two steps and saves "global_step2" into argv[1];
// the checkpoint test kills it while the save stalls before publishing
// (STRATUM_CHECKPOINT_TEST_STALL_S).
#include <nlohmann/json.hpp>

#include "ckpt_trainer.h"
#include "stratum/distributed/init.h"
#include "stratum/engine/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto ctx = stratum::distributed::init();
  {
    stratum::test::Trainer t(2, ctx.cpu_world);
    t.train_step(0);
    t.train_step(1);
    stratum::save_checkpoint(t.engine->core(), argv[1], "global_step2", {{"marker", "second"}});
  }
  ctx.cpu_world.reset();
  stratum::distributed::finalize();
  return 0;
}
