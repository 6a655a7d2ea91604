#include "stratum/distributed/wait_context.h"

namespace stratum::distributed {
namespace {
thread_local const WaitContext* t_current = nullptr;
}

WaitContext::WaitContext(std::string what) : what_(std::move(what)), outer_(t_current) { t_current = this; }

WaitContext::~WaitContext() { t_current = outer_; }

std::string WaitContext::prefix() { return t_current ? t_current->what_ + ": " : std::string(); }

}  // namespace stratum::distributed
