#include "stratum/distributed/mpi_session.h"

#include <mpi.h>

#include <mutex>

#include "stratum/distributed/init.h"

namespace stratum::distributed {
namespace {

struct MpiSession {
  ~MpiSession() { finalize(); }
};

struct Registry {
  std::mutex mutex;
  std::weak_ptr<MpiSession> live;
};

// Never destroyed: the last session may end during static destruction at exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

std::shared_ptr<void> mpi_session() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto s = r.live.lock()) return s;
  auto s = std::make_shared<MpiSession>();
  r.live = s;
  return s;
}

}  // namespace stratum::distributed
