#pragma once
// Runs a shell command line in a test (never in the product: the launcher and
// the programs run argv vectors) and returns its exit status, merged output and
// duration. Tests of whole programs and mpirun jobs share it.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace stratum::test {

struct CommandResult {
  int status = -1;  // exit status, or 128 + signal
  std::string output;  // stdout and stderr
  double seconds = 0;
};

inline CommandResult run_command(const std::string& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Open MPI refuses root unless told; tests run as root on CI machines.
inline constexpr const char* kMpiRootEnv = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

}  // namespace stratum::test
