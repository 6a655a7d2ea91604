#include "stratum/distributed/launch/launcher_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/process.h"

namespace stratum::distributed::launch {

LauncherOutcome supervise_launcher_process(const std::vector<std::string>& argv, const std::string& name,
                                           const std::vector<EnvVar>& env) {
  SignalPipe signals({SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD});
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  set_nonblocking(err[0]);
  SpawnOptions spawn_options;
  spawn_options.argv = argv;
  spawn_options.set_env = env;
  spawn_options.stderr_fd = err[1];
  spawn_options.parent_death_signal = SIGTERM;  // if stratum-run is killed outright, mpirun/srun still stops the job
  const pid_t child = spawn(spawn_options);
  ::close(err[1]);
  int err_fd = err[0];

  std::string line_buf;
  std::optional<std::string> failure;  // the first rank a shim named
  auto scan = [&](std::string_view data) {
    line_buf.append(data);
    size_t nl;
    while ((nl = line_buf.find('\n')) != std::string::npos) {
      const std::string line = line_buf.substr(0, nl);
      line_buf.erase(0, nl + 1);
      const std::string tag = "stratum-run: rank ";
      if (!failure && line.rfind(tag, 0) == 0) failure = line.substr(std::string("stratum-run: ").size());
    }
    if (line_buf.size() > 65536) line_buf.clear();
  };

  bool exited = false;
  int status = 0;
  std::optional<int> stop_signal;
  long long drain_deadline = 0;
  while (true) {
    if (exited && (err_fd < 0 || monotonic_ms() >= drain_deadline)) break;
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {err_fd, POLLIN, 0}};
    int timeout = 1000;
    if (exited) timeout = static_cast<int>(std::max(0LL, drain_deadline - monotonic_ms()));
    const int ready = ::poll(fds, 2, timeout);
    if (ready < 0 && errno != EINTR) break;
    for (const auto& ev : signals.drain()) {
      if (ev.signo == SIGCHLD || exited) continue;
      if ((ev.signo == SIGINT || ev.signo == SIGTERM || ev.signo == SIGHUP) && !stop_signal) stop_signal = ev.signo;
      // A terminal's ^C reaches mpirun/srun too (same process group): don't double it.
      if (ev.code == SI_KERNEL) continue;
      kill(child, ev.signo);
    }
    if (!exited && waitpid(child, &status, WNOHANG) == child) {
      exited = true;
      drain_deadline = monotonic_ms() + 2000;
    }
    if (err_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char buf[65536];
      const ssize_t n = ::read(err_fd, buf, sizeof buf);
      if (n > 0) {
        write_all(STDERR_FILENO, std::string_view(buf, static_cast<size_t>(n)));
        scan(std::string_view(buf, static_cast<size_t>(n)));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(err_fd);
        err_fd = -1;
      }
    }
  }
  if (err_fd >= 0) ::close(err_fd);

  LauncherOutcome outcome;
  outcome.result = name + " " + describe_wait_status(status);
  outcome.failed_rank = failure;
  if (stop_signal) {
    outcome.stop_signal = stop_signal;
    outcome.exit_code = 128 + *stop_signal;
  } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    const int code = exit_code_of(status);
    outcome.exit_code = code == 0 ? 1 : code;
  }
  return outcome;
}

int run_launcher_process(const std::vector<std::string>& argv, const std::string& name,
                         const std::vector<EnvVar>& env) {
  const LauncherOutcome outcome = supervise_launcher_process(argv, name, env);
  if (outcome.stop_signal)
    say("job stopped by " + signal_name(*outcome.stop_signal) + " (" + outcome.result + ")");
  else if (outcome.exit_code != 0)
    say("job failed: " + outcome.failure());
  return outcome.exit_code;
}

}  // namespace stratum::distributed::launch
