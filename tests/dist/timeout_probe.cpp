// A 2-rank program in which rank 1 never joins rank 0's all_reduce: rank 0
// must report the collective and its peers, and end the job (no hang).
// Run with STRATUM_DISABLE_NCCL=1 on GPU machines: it tests the MPI path.
#include <ATen/ATen.h>

#include <chrono>
#include <thread>

#include "stratum/dist/init.h"

int main() {
  auto ctx = stratum::dist::init();
  if (ctx.rank == 0) {
    at::Tensor t = at::ones({1024});
    ctx.cpu_world->all_reduce(t, stratum::dist::ReduceOp::sum)->wait();
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  stratum::dist::finalize();
  return 0;
}
