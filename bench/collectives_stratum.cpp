// Collective bandwidth of Stratum's communicator (NCCL on GPUs, MPI on CPUs),
// measured like nccl-tests: `iters` back-to-back operations, host-timed after a
// barrier, bus bandwidth from algorithm bandwidth with nccl-tests' factors.
// Prints CSV lines: system,op,bytes,time_us,algbw_GBps,busbw_GBps
// Run: mpirun -np 2 build/bin/bench_collectives [--max-bytes N] [--dtype bf16|fp32]
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>

#include "stratum/distributed/init.h"

using namespace stratum::distributed;

namespace {

double bus_factor(CommOp op, int n) {
  if (op == CommOp::all_reduce) return 2.0 * (n - 1) / n;
  return static_cast<double>(n - 1) / n;
}

int iterations_for(int64_t bytes) {
  // Enough work to time (>= ~50 ms at 400 GB/s), bounded for small messages.
  const int64_t target = int64_t(20) << 30;
  return static_cast<int>(std::max<int64_t>(10, std::min<int64_t>(500, target / std::max<int64_t>(bytes, 1))));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Collective bandwidth of Stratum's communicator, nccl-tests' way: CSV lines (rank 0)"};
  int64_t max_bytes = int64_t(1) << 30;
  std::string dtype_name = "bf16";
  app.add_option("--max-bytes", max_bytes, "largest buffer (sizes from 4 KiB in x4 steps)")->capture_default_str();
  app.add_option("--dtype", dtype_name, "element type")->check(CLI::IsMember({"bf16", "fp32"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const at::ScalarType dtype = dtype_name == "fp32" ? at::kFloat : at::kBFloat16;
  DistContext ctx = init();
  auto comm = ctx.device_world();
  const int n = comm->size();
  const auto opts = at::TensorOptions().dtype(dtype).device(ctx.device());
  const int64_t elem = at::elementSize(dtype);
  if (ctx.rank == 0) std::printf("system,op,bytes,time_us,algbw_GBps,busbw_GBps\n");
  for (CommOp op : {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather}) {
    for (int64_t bytes = 4 << 10; bytes <= max_bytes; bytes *= 4) {
      const int64_t numel = bytes / elem;  // the full buffer (nccl-tests' size convention)
      at::Tensor full = at::ones({numel}, opts);
      at::Tensor shard = at::ones({numel / n}, opts);
      auto issue = [&]() -> WorkPtr {
        if (op == CommOp::all_reduce) return comm->all_reduce(full, ReduceOp::sum);
        if (op == CommOp::reduce_scatter) return comm->reduce_scatter(shard, full, ReduceOp::sum);
        return comm->all_gather(full, shard);
      };
      for (int i = 0; i < 5; ++i) issue()->wait();  // warm-up
      comm->barrier()->wait();
      const int iters = iterations_for(bytes);
      auto t0 = std::chrono::steady_clock::now();
      WorkPtr last;
      for (int i = 0; i < iters; ++i) {
        last = issue();
        last->wait();
      }
      last->synchronize();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      const double algbw = bytes / seconds / 1e9;
      if (ctx.rank == 0)
        std::printf("stratum,%s,%lld,%.2f,%.2f,%.2f\n", comm_op_name(op), static_cast<long long>(bytes), seconds * 1e6,
                    algbw, algbw * bus_factor(op, n));
      std::fflush(stdout);
    }
  }
  ctx.gpu_world.reset();  // NCCL's CUDA state before MPI finalizes (and may release the context)
  ctx.cpu_world.reset();
  finalize();
  return 0;
}
