// A 2-rank program in which rank 1 never joins rank 0's all_reduce: rank 0
// must report the collective and its peers, and end the job (no hang).
// `timeout_probe` tests the MPI path (run with STRATUM_DISABLE_NCCL=1 on GPU
// machines); `timeout_probe nccl` the NCCL watchdog on CUDA tensors.
#include <ATen/ATen.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "stratum/distributed/init.h"

int main(int argc, char** argv) {
  const bool nccl = argc > 1 && std::strcmp(argv[1], "nccl") == 0;
  auto ctx = stratum::distributed::init();
  if (nccl && !ctx.gpu_world) return 3;
  {
    auto comm = nccl ? ctx.gpu_world : ctx.cpu_world;
    if (ctx.rank == 0) {
      at::Tensor t = at::ones({1024}, nccl ? at::TensorOptions().device(c10::kCUDA, ctx.cuda_device) : at::TensorOptions());
      auto work = comm->all_reduce(t, stratum::distributed::ReduceOp::sum);
      work->wait();
      work->synchronize();  // NCCL: the host waits; the watchdog must end the job first
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(60));
    }
  }
  ctx.cpu_world.reset();
  ctx.gpu_world.reset();
  stratum::distributed::finalize();
  return 0;
}
