#pragma once
// Steps that can fail on some ranks only (reading a checkpoint, a config, a
// data file) end with the ranks agreeing on the outcome, so a failure on one
// rank never leaves the others waiting in their next collective until the
// communication timeout.
#include <functional>
#include <string>

#include <c10/core/Device.h>

#include "stratum/distributed/communicator.h"

namespace stratum::distributed {

// Collective over `comm` (every rank calls it): when `local_error` is
// non-empty on any rank, every rank throws AgreedError. A failing rank's
// message is its own error; the others' names the failing ranks. `device` is
// where `comm` takes tensors.
void agree_on_error(Communicator& comm, c10::Device device, const std::string& step, const std::string& local_error);

// Runs `body` on this rank, catching its exception, then agree_on_error.
void agree_on_success(Communicator& comm, c10::Device device, const std::string& step,
                      const std::function<void()>& body);

}  // namespace stratum::distributed
