#include "stratum/distributed/launch/rank_shim_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <tuple>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/heartbeat.h"
#include "stratum/distributed/flight_recorder.h"
#include "stratum/distributed/flight_report.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/process.h"
#include "stratum/distributed/launch/rank_shim.h"

namespace stratum::distributed::launch {

int run_rank_shim(const std::vector<std::string>& shim_args) {
  const GetEnv env_or_null = [](const char* name) -> const char* { return ::getenv(name); };
  ShimArgs args;
  RankInfo rank;
  try {
    args = parse_shim_arguments(shim_args);
    rank = shim_rank_info(args, env_or_null, this_host_name());
    for (const auto& [k, v] : rank_environment(rank, args, env_or_null)) setenv(k.c_str(), v.c_str(), 1);
  } catch (const Error& e) {
    say(std::string("error: ") + e.what());
    return kBadInput;
  }
  const std::string who = "rank " + std::to_string(rank.rank) + " (host " + args.node + ", local rank " +
                          std::to_string(rank.local_rank) + ")";

  int log_fd = -1;
  if (!args.log_dir.empty()) {
    try {
      fs::make_directories(args.log_dir);
    } catch (const Error&) {
      // reported by open() below
    }
    const std::string path = args.log_dir + "/rank_" + std::to_string(rank.rank) + ".log";
    log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      say(who + ": cannot write " + path + ": " + std::strerror(errno));
      return kBadInput;
    }
  }
  const bool relay = args.prefix || log_fd >= 0;
  // The ranks' flight-recorder files (STRATUM_FLIGHT_DIR, set by the launcher):
  // this rank's from an earlier attempt goes, so what the report reads is this run's.
  const char* flight_env = ::getenv("STRATUM_FLIGHT_DIR");
  const std::string flight_dir = flight_env ? flight_env : "";
  if (!flight_dir.empty()) ::unlink(flight_file(flight_dir, rank.rank).c_str());

  SignalPipe signals({SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD});
  int out_r = -1, out_w = -1, err_r = -1, err_w = -1;
  SpawnOptions spawn_options;
  spawn_options.argv = args.program;
  spawn_options.parent_death_signal = SIGKILL;
  // The program's heartbeat socket (core/heartbeat.h): signs of progress, and
  // word that it ends because another rank failed.
  int beats[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, beats) == 0) {
    fcntl(beats[0], F_SETFD, FD_CLOEXEC);
    set_nonblocking(beats[0]);
    spawn_options.set_env.emplace_back(heartbeat::kFdVariable, std::to_string(beats[1]));
  }
  if (relay) {
    // srun hands tasks pipes: a pty of our own keeps the program line-buffered, as under mpirun.
    std::tie(out_r, out_w) = output_channel(isatty(STDOUT_FILENO) == 1 || args.slurm);
    std::tie(err_r, err_w) = output_channel(false);
    spawn_options.stdout_fd = out_w;
    spawn_options.stderr_fd = err_w;
  }
  pid_t child = -1;
  try {
    child = spawn(spawn_options);
  } catch (const Error& e) {
    say(who + ": " + e.what());
    return 127;
  }
  if (relay) {
    ::close(out_w);
    ::close(err_w);
  }
  if (beats[1] >= 0) ::close(beats[1]);
  int beat_fd = beats[0];
  bool watching = false, peer_failed = false, hung = false;
  long long last_beat = monotonic_ms();

  LinePrefixer out_prefix(rank_prefix(rank)), err_prefix(rank_prefix(rank));
  auto deliver = [&](int to_fd, LinePrefixer& prefixer, std::string_view data) {
    if (log_fd >= 0) write_all(log_fd, data);
    if (args.prefix) {
      write_all(to_fd, prefixer.feed(data));
    } else if (log_fd < 0) {
      write_all(to_fd, data);
    }
  };
  auto flush_partials = [&] {
    if (!args.prefix) return;
    if (out_prefix.has_partial()) write_all(STDOUT_FILENO, out_prefix.take_partial());
    if (err_prefix.has_partial()) write_all(STDERR_FILENO, err_prefix.take_partial());
  };
  auto finish_stream = [&](int i) {
    if (args.prefix) write_all(i == 1 ? STDOUT_FILENO : STDERR_FILENO, (i == 1 ? out_prefix : err_prefix).finish());
  };

  bool exited = false, stop_requested = false;
  int status = 0;
  long long drain_deadline = 0;
  while (true) {
    if (exited && ((out_r < 0 && err_r < 0) || monotonic_ms() >= drain_deadline)) break;
    pollfd fds[4] = {{signals.fd(), POLLIN, 0}, {out_r, POLLIN, 0}, {err_r, POLLIN, 0}, {beat_fd, POLLIN, 0}};
    int timeout = 1000;
    if (out_prefix.has_partial() || err_prefix.has_partial()) timeout = 100;
    if (exited) timeout = static_cast<int>(std::min<long long>(timeout, std::max(0LL, drain_deadline - monotonic_ms())));
    const int ready = ::poll(fds, 4, timeout);
    if (ready < 0 && errno != EINTR) break;
    if (ready == 0) flush_partials();  // an unfinished line, quiet for 100 ms: show it

    for (const auto& ev : signals.drain()) {
      if (ev.signo == SIGCHLD) continue;  // reaped below
      if (ev.signo == SIGINT || ev.signo == SIGTERM || ev.signo == SIGHUP) stop_requested = true;
      // mpirun/orted (our parent) signals the whole process group, which the
      // program shares, and slurmstepd every process of the step: the program
      // has the signal already. Anyone else's, pass on.
      if (!exited && ev.sender != getppid()) kill(child, ev.signo);
    }
    if (beat_fd >= 0 && (fds[3].revents & (POLLIN | POLLHUP | POLLERR))) {
      char buf[4096];
      const ssize_t n = ::recv(beat_fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        last_beat = monotonic_ms();
        for (ssize_t k = 0; k < n; ++k) {
          if (buf[k] == heartbeat::kStartWatch) watching = true;
          if (buf[k] == heartbeat::kPeerFailed) peer_failed = true;
        }
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(beat_fd);
        beat_fd = -1;
      }
    }
    if (!exited && !hung && watching && args.heartbeat_timeout_s > 0 &&
        monotonic_ms() - last_beat > 1000LL * args.heartbeat_timeout_s) {
      hung = true;
      write_all(STDERR_FILENO, rank_hang_line(rank, args) + "\n");
      // What the ranks of this host were doing: the ones waiting wrote their
      // open operation, this one (stopped or stuck) its last state. Read
      // before the kill, while the others still wait (a rank's file is at
      // most a flush period old, flight_recorder.h).
      if (!flight_dir.empty()) {
        try {
          // Not "stratum-run: rank ...": the launcher takes the first such line as the failure.
          write_all(STDERR_FILENO, "stratum-run: hang of rank " + std::to_string(rank.rank) + ", " +
                                       hang_report(read_flight_dir(flight_dir), {rank.rank}, flight_now_seconds()) +
                                       "\n");
        } catch (const std::exception& e) {
          write_all(STDERR_FILENO, std::string("stratum-run: no flight-recorder report: ") + e.what() + "\n");
        }
      }
      kill(child, SIGKILL);
    }
    if (!exited) {
      const pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) {
        exited = true;
        drain_deadline = monotonic_ms() + 1000;  // a background grandchild may hold the pipes open
      }
    }
    for (int i = 1; i < 3; ++i) {
      int& fd = (i == 1) ? out_r : err_r;
      if (fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        deliver(i == 1 ? STDOUT_FILENO : STDERR_FILENO, i == 1 ? out_prefix : err_prefix,
                std::string_view(buf, static_cast<size_t>(n)));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {  // EOF, or EIO from a pty whose writers left
        ::close(fd);
        fd = -1;
        finish_stream(i);
      }
    }
  }
  for (int i = 1; i < 3; ++i) {
    int& fd = (i == 1) ? out_r : err_r;
    if (fd < 0) continue;
    ::close(fd);
    fd = -1;
    finish_stream(i);
  }
  if (log_fd >= 0) ::close(log_fd);
  if (beat_fd >= 0) ::close(beat_fd);

  if (hung) return 124;  // as a collective timeout ends a job (and timeout(1))
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  // It stopped because another rank failed (that rank's shim names it): not a failure of its own.
  if (peer_failed && WIFEXITED(status)) return 0;
  // srun stops a step on SIGTERM or SIGINT by SIGKILLing its processes one by
  // one: when the program went first, this shim is next. Wait for that before
  // naming the rank, so that only a SIGKILL of this rank alone (the OOM killer)
  // is reported.
  if (args.slurm && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
    const timespec pause{0, 500 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  // A rank told to stop (the job is ending) is not the one to blame.
  if (!stop_requested) write_all(STDERR_FILENO, rank_failure_line(rank, args, status) + "\n");
  return exit_code_of(status);
}

}  // namespace stratum::distributed::launch
