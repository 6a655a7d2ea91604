#include "stratum/distributed/job.h"

#include <iostream>

#include "stratum/core/error.h"
#include "stratum/core/heartbeat.h"
#include "stratum/core/log.h"

namespace stratum::distributed {

int run_distributed_job(const std::string& program, const std::function<int(DistContext&)>& body,
                        const InitOptions& options) {
  DistContext ctx;
  try {
    ctx = init(options);
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << std::endl;
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
      log::error(e.what());
      rc = 1;
    } else {
      abort_job(std::string(e.what()) + "\n  rank " + std::to_string(ctx.rank) + " failed alone", 1);
    }
  } catch (...) {
    abort_job("rank " + std::to_string(ctx.rank) + " failed with an exception that is not a std::exception", 1);
  }
  ctx.cpu_world.reset();
  ctx.gpu_world.reset();
  finalize();
  return rc;
}

}  // namespace stratum::distributed
