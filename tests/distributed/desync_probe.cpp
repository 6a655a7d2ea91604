// A program whose ranks disagree, run under the comms logger's debug mode:
//   desync_probe           two matching collectives, then rank 1 issues
//                          all_gather where the others issue all_reduce;
//   desync_probe missing   rank 1 never reaches the third collective.
// Either way the job must end with a report naming the collective, not hang.
#include <ATen/ATen.h>

#include <chrono>
#include <string>
#include <thread>

#include "stratum/distributed/init.h"
#include "stratum/distributed/logged_communicator.h"

using namespace stratum::distributed;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "mismatch";
  auto ctx = init();
  stratum::config::CommsLoggerConfig cfg;
  cfg.debug = true;
  auto world = with_comms_logger(ctx.device_world(), ctx.cpu_world, cfg);
  const auto device = ctx.cuda_device >= 0 ? c10::Device(c10::kCUDA, ctx.cuda_device) : c10::Device(c10::kCPU);
  const int n = world->size();

  at::Tensor t = at::ones({1024}, at::TensorOptions().device(device));  // 4.0 KiB of Float
  world->barrier()->wait();                                             // #1
  world->all_reduce(t, ReduceOp::sum)->wait();                          // #2
  if (ctx.rank == 1 && mode == "missing") {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  } else if (ctx.rank == 1) {
    at::Tensor out = at::empty({1024 * n}, t.options());
    world->all_gather(out, t)->wait();  // #3, against everyone else's all_reduce
  } else {
    world->all_reduce(t, ReduceOp::sum)->wait();  // #3
  }
  world.reset();
  finalize();
  return 0;
}
