#include "stratum/distributed/job.h"

#include <c10/util/Exception.h>

#include <iostream>

#include "stratum/core/error.h"
#include "stratum/core/heartbeat.h"
#include "stratum/core/log.h"

namespace stratum::distributed {

std::string describe_exception(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

int run_distributed_job(const std::string& program, const std::function<int(DistContext&)>& body,
                        const InitOptions& options) {
  DistContext ctx;
  try {
    ctx = init(options);
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << describe_exception(e) << std::endl;
    finalize();
    return 2;
  }
  int rc = 0;
  try {
    rc = body(ctx);
  } catch (const AgreedError& e) {
    if (e.report()) log::error(e.what());
    else log::debug(e.what());
    if (!e.failed_here()) heartbeat::peer_failed();
    rc = 1;
  } catch (const std::exception& e) {
    if (ctx.world_size == 1) {
      log::error(describe_exception(e));
      rc = 1;
    } else {
      abort_job(describe_exception(e) + "\n  rank " + std::to_string(ctx.rank) + " failed alone", 1);
    }
  } catch (...) {
    abort_job("rank " + std::to_string(ctx.rank) + " failed with an exception that is not a std::exception", 1);
  }
  // NCCL's CUDA state goes while the context lives: the last MPI
  // communicator finalizes MPI, which may release the CUDA context.
  ctx.gpu_world.reset();
  ctx.cpu_world.reset();
  finalize();
  return rc;
}

}  // namespace stratum::distributed
