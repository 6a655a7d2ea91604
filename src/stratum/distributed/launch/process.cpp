#include "stratum/distributed/launch/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "stratum/core/error.h"

extern char** environ;

namespace stratum::distributed::launch {
namespace {

// The signals stratum-run catches; children get them back at their defaults.
constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE, SIGALRM};

}  // namespace

long long monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void say(const std::string& line) { write_all(STDERR_FILENO, "stratum-run: " + line + "\n"); }

std::string signal_name(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
#endif
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGPIPE: return "SIGPIPE";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(sig);
  }
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string s = "killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    if (WCOREDUMP(status)) s += ", core dumped";
    return s;
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// ---- LinePrefixer ----

void LinePrefixer::emit(std::string& out, std::string_view piece) {
  for (char c : piece) {
    // "\r\n" ends one line, not two.
    if (at_line_start_ && !(c == '\n' && last_ == '\r')) out += prefix_;
    out += c;
    at_line_start_ = (c == '\n' || c == '\r');
    last_ = c;
  }
}

std::string LinePrefixer::feed(std::string_view data) {
  partial_.append(data);
  std::string out;
  const auto end = partial_.find_last_of("\r\n");
  if (end == std::string::npos) {
    if (partial_.size() >= 64 * 1024) out = take_partial();  // a very long line: let it through
    return out;
  }
  emit(out, std::string_view(partial_).substr(0, end + 1));
  partial_.erase(0, end + 1);
  return out;
}

std::string LinePrefixer::take_partial() {
  std::string out;
  emit(out, partial_);
  partial_.clear();
  return out;
}

std::string LinePrefixer::finish() {
  std::string out = take_partial();
  if (!at_line_start_) {
    out += '\n';
    at_line_start_ = true;
    last_ = '\n';
  }
  return out;
}

// ---- processes ----

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
}

std::pair<int, int> output_channel(bool want_pty) {
  if (want_pty) {
    const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0) {
      if (const char* name = ptsname(master)) {
        const int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (slave >= 0) {
          termios t{};
          if (tcgetattr(slave, &t) == 0) {
            t.c_oflag &= ~static_cast<tcflag_t>(OPOST);  // no "\n" -> "\r\n"
            t.c_lflag &= ~static_cast<tcflag_t>(ECHO | ICANON | ISIG | IEXTEN);
            tcsetattr(slave, TCSANOW, &t);
          }
          set_nonblocking(master);
          return {master, slave};
        }
      }
    }
    if (master >= 0) ::close(master);
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  set_nonblocking(p[0]);
  return {p[0], p[1]};
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

pid_t spawn(const SpawnOptions& options) {
  if (options.argv.empty()) throw Error("spawn: empty command");
  std::vector<char*> argv;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  // The environment: ours, with set_env replacing or adding entries.
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : options.set_env) replaced = replaced || k == name;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : options.set_env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));

  // Block signals over fork so that no handler of ours runs in the child.
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(err_pipe[0]);
    if (options.parent_death_signal != 0) {
      prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
      if (getppid() != parent) _exit(128 + options.parent_death_signal);
    }
    if (options.new_process_group) setpgid(0, 0);
    for (int sig : kHandledSignals) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int wanted[3] = {options.stdin_fd, options.stdout_fd, options.stderr_fd};
    for (int target = 0; target < 3; ++target) {
      const int fd = wanted[target];
      if (fd < 0) continue;
      if (fd == target) {
        fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) & ~FD_CLOEXEC);
      } else if (dup2(fd, target) < 0) {
        const int e = errno;
        (void)!::write(err_pipe[1], &e, sizeof e);
        _exit(127);
      }
    }
    execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    (void)!::write(err_pipe[1], &e, sizeof e);
    _exit(127);
  }
  const int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(err_pipe[0]);
    throw Error(std::string("fork: ") + std::strerror(fork_errno));
  }
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw Error("cannot run '" + options.argv[0] + "': " + std::strerror(child_errno));
  }
  return pid;
}

std::optional<std::string> capture_output(const std::vector<std::string>& argv, int timeout_s) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  pid_t pid = -1;
  try {
    SpawnOptions opts;
    opts.argv = argv;
    opts.stdin_fd = devnull;
    opts.stdout_fd = out[1];
    opts.stderr_fd = devnull;
    pid = spawn(opts);
  } catch (const Error&) {
    pid = -1;
  }
  ::close(out[1]);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    ::close(out[0]);
    return std::nullopt;
  }
  std::string text;
  const long long deadline = monotonic_ms() + 1000LL * timeout_s;
  bool timed_out = false;
  while (true) {
    const long long left = deadline - monotonic_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return text;
}

std::optional<std::string> find_program(const std::string& name) {
  auto runnable = [](const std::string& path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return runnable(name) ? std::optional<std::string>(name) : std::nullopt;
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir.assign(1, '.');
    const std::string candidate = dir + "/" + name;
    if (runnable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error(std::string("cannot find this program's path (/proc/self/exe): ") + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

// ---- SignalPipe ----

namespace {
int g_signal_pipe[2] = {-1, -1};

void on_signal(int signo, siginfo_t* info, void*) {
  const int saved = errno;
  SignalEvent ev;
  ev.signo = signo;
  ev.sender = info ? info->si_pid : 0;
  ev.code = info ? info->si_code : 0;
  (void)!::write(g_signal_pipe[1], &ev, sizeof ev);
  errno = saved;
}
}  // namespace

SignalPipe::SignalPipe(const std::vector<int>& signals) {
  if (g_signal_pipe[0] >= 0) throw Error("SignalPipe: only one at a time");
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  signal(SIGPIPE, SIG_IGN);
  for (int sig : signals) {
    struct sigaction sa{};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

SignalPipe::~SignalPipe() {
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

int SignalPipe::fd() const { return g_signal_pipe[0]; }

std::vector<SignalEvent> SignalPipe::drain() {
  std::vector<SignalEvent> out;
  SignalEvent ev;
  while (true) {
    const ssize_t n = ::read(g_signal_pipe[0], &ev, sizeof ev);
    if (n == static_cast<ssize_t>(sizeof ev)) {
      out.push_back(ev);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  return out;
}

}  // namespace stratum::distributed::launch
