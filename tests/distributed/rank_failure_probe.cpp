// A 2-rank job in which rank 1 fails while rank 0 waits for it in a
// collective, ended through distributed::run_distributed_job as Stratum's
// programs end. Modes:
//   lone-error    rank 1 throws outside any agreement: the job must abort
//   agreed-error  rank 1 throws inside agree_on_success: every rank ends cleanly
//   hang          rank 1 stops making progress after training began: the rank
//                 shim's heartbeat timeout must end the job
#include <ATen/ATen.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "stratum/core/error.h"
#include "stratum/core/heartbeat.h"
#include "stratum/distributed/agreement.h"
#include "stratum/distributed/job.h"

using namespace stratum;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  return distributed::run_distributed_job("rank_failure_probe", [&](distributed::DistContext& ctx) {
    auto& world = *ctx.cpu_world;
    at::Tensor t = at::ones({16});
    if (mode == "lone-error") {
      if (ctx.rank == 1) throw Error("data shard 7 is unreadable");
      world.all_reduce(t, distributed::ReduceOp::sum)->wait();
    } else if (mode == "agreed-error") {
      distributed::agree_on_success(world, c10::kCPU, "reading the data", [&] {
        if (ctx.rank == 1) throw Error("data shard 7 is unreadable");
      });
    } else if (mode == "hang") {
      heartbeat::start_watch();
      if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
      world.all_reduce(t, distributed::ReduceOp::sum)->wait();
    } else {
      throw Error("usage: rank_failure_probe lone-error|agreed-error|hang");
    }
    return 0;
  });
}
