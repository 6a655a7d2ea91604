#include "stratum/distributed/agreement.h"

#include <ATen/ATen.h>

#include <optional>

#include "stratum/core/error.h"
#include "stratum/distributed/job.h"

namespace stratum::distributed {

namespace {

// `prior`: an agreement inside the step already failed (on this rank's group);
// this rank still takes part, then rethrows it unchanged.
void agree(Communicator& comm, c10::Device device, const std::string& step, const std::string& local_error,
           const AgreedError* prior) {
  // One slot per rank: after the sum every rank knows which ranks failed.
  at::Tensor failed = at::zeros({comm.size()}, at::TensorOptions().dtype(at::kFloat).device(device));
  if (!local_error.empty() || prior) failed[comm.rank()].fill_(1);
  comm.all_reduce(failed, ReduceOp::sum)->wait();
  const at::Tensor flags = failed.cpu();
  const float* f = flags.data_ptr<float>();
  std::vector<int> ranks;
  for (int r = 0; r < comm.size(); ++r)
    if (f[r] > 0) ranks.push_back(r);
  if (ranks.empty()) return;
  if (prior) throw *prior;
  if (!local_error.empty()) {
    // Every rank failed alike (a bad config they all read): the lowest speaks for all.
    const bool everyone = static_cast<int>(ranks.size()) == comm.size();
    throw AgreedError(local_error, /*failed_here=*/true, /*report=*/!everyone || comm.rank() == ranks.front());
  }
  std::string names;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) names += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) names += ", ... (" + std::to_string(ranks.size()) + " in all)";
  throw AgreedError(step + " failed on " + (ranks.size() == 1 ? "rank " : "ranks ") + names + " (see " +
                        (ranks.size() == 1 ? "its" : "their") + " message)",
                    /*failed_here=*/false, /*report=*/false);
}

}  // namespace

void agree_on_error(Communicator& comm, c10::Device device, const std::string& step, const std::string& local_error) {
  agree(comm, device, step, local_error, nullptr);
}

void agree_on_success(Communicator& comm, c10::Device device, const std::string& step,
                      const std::function<void()>& body) {
  std::string error;
  std::optional<AgreedError> prior;
  try {
    body();
  } catch (const AgreedError& e) {
    prior = e;
  } catch (const std::exception& e) {
    error = describe_exception(e);
    if (error.empty()) error = step + " failed";
  }
  agree(comm, device, step, error, prior ? &*prior : nullptr);
}

}  // namespace stratum::distributed
