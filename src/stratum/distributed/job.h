#pragma once
// How a distributed program ends. Every rank runs `body`; then:
// - it returns: communicators released, MPI finalized, its status returned;
// - it throws AgreedError (every rank learned of the failure together): the
//   ranks that failed print their error, the others tell stratum-run's shim
//   they stop because of a peer (heartbeat::peer_failed, so it names the
//   failing rank, not them); all return 1 after a clean finalize;
// - it throws anything else (this rank failed alone, its peers may be waiting
//   in a collective): the error is printed with the rank and the whole job is
//   aborted (MPI_Abort), which ends every rank within seconds.
#include <functional>
#include <string>

#include "stratum/distributed/init.h"

namespace stratum::distributed {

// What an exception says, for the user: torch's errors without their C++
// backtrace (c10::Error::what_without_backtrace), others as they are.
std::string describe_exception(const std::exception& e);

// `program` prefixes start-up errors ("stratum-train: error: ...").
int run_distributed_job(const std::string& program, const std::function<int(DistContext&)>& body,
                        const InitOptions& options = InitOptions());

}  // namespace stratum::distributed
