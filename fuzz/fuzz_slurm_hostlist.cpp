// SLURM hostlists as stratum-run reads them (--include/--exclude under
// --launcher slurm, SLURM_JOB_NODELIST): the bytes as one list, every name
// visited (up to the cap, so a list of a million names stays within -timeout)
// and checked as a host name, then as an '@'-separated --include.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/slurm_hostlist.h"

namespace launch = stratum::distributed::launch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    size_t names = 0;
    launch::for_each_slurm_host(text, "fuzz", [&](const std::string& name) {
      launch::check_hostname(name, "fuzz");
      return ++names < 4096;  // the expansion itself is tested up to the cap in test_srun_command
    });
  } catch (const stratum::Error&) {
  }
  try {
    (void)launch::first_slurm_host(text, "fuzz");
  } catch (const stratum::Error&) {
  }
  return 0;
}
