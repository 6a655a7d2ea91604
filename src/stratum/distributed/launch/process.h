#pragma once
// Process helpers for stratum-run: fork/exec without a shell, wait statuses in
// words, a self-pipe for signals, and the per-rank line prefixer.
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stratum::distributed::launch {

// "SIGKILL" for 9; "signal 64" when the number has no name.
std::string signal_name(int sig);
// "exited with status 3", "killed by signal 9 (SIGKILL)" for a waitpid status.
std::string describe_wait_status(int status);
// The shell's convention: the exit status, or 128 + signal number.
int exit_code_of(int status);

// Splits output into lines and puts `prefix` before each. Only whole lines come
// out of feed() (a line ends at '\n' or '\r', so progress bars redraw under
// their prefix); the unfinished tail waits for more data or take_partial().
class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string feed(std::string_view data);
  // The unfinished tail (prefixed unless it continues a line already started);
  // empty when there is none.
  std::string take_partial();
  bool has_partial() const { return !partial_.empty(); }
  // At the end of the stream: the tail, and a newline if the last line was left
  // open (so the next rank's output starts on a line of its own).
  std::string finish();

 private:
  void emit(std::string& out, std::string_view piece);
  std::string prefix_;
  std::string partial_;
  bool at_line_start_ = true;
  char last_ = 0;
};

struct SpawnOptions {
  std::vector<std::string> argv;                             // argv[0] is looked up in PATH (execvp rules)
  std::vector<std::pair<std::string, std::string>> set_env;  // added to / replacing this process's environment
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;         // -1: inherit
  int parent_death_signal = 0;                               // Linux PR_SET_PDEATHSIG, 0: none
  bool new_process_group = false;                            // setpgid(0, 0) in the child
};

// fork + execvp (never a shell). The child starts with default dispositions
// for the signals stratum-run handles and an empty signal mask. Throws
// stratum::Error "cannot run 'prog': <reason>" when the exec fails.
pid_t spawn(const SpawnOptions& options);

// Runs argv (no shell) and returns its stdout if it exits 0 within timeout_s;
// nullopt if it cannot run, fails or takes longer (it is then killed).
std::optional<std::string> capture_output(const std::vector<std::string>& argv, int timeout_s);

// The program file execvp would run for `name` (absolute or relative path when
// it contains '/', else the first executable match in PATH), or nullopt.
std::optional<std::string> find_program(const std::string& name);
// This executable's absolute path (/proc/self/exe).
std::string self_executable();

// Writes all of `data` to fd, retrying on EINTR/partial writes; false on error.
bool write_all(int fd, std::string_view data);

// Signals delivered through a pipe, so a poll() loop sees them as events.
struct SignalEvent {
  int signo = 0;
  pid_t sender = 0;  // si_pid
  int code = 0;      // si_code (SI_USER for kill(), SI_KERNEL for a terminal's ^C)
};
class SignalPipe {
 public:
  // Installs handlers for `signals` (SA_RESTART) and ignores SIGPIPE.
  explicit SignalPipe(const std::vector<int>& signals);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  int fd() const;
  std::vector<SignalEvent> drain();
};

// Sets O_NONBLOCK and FD_CLOEXEC on fd.
void set_nonblocking(int fd);

// A channel for a child's output: a pty when `want_pty` and one can be had (a
// program keeps line-buffered output on a terminal), else a pipe. Returns
// {read end (non-blocking), write end}; both close on exec.
std::pair<int, int> output_channel(bool want_pty);

// Milliseconds of CLOCK_MONOTONIC, for the supervision loops' deadlines.
long long monotonic_ms();

// Writes "stratum-run: <line>" to stderr: how stratum-run and its shims speak.
void say(const std::string& line);
// The exit status for bad input (flags, hostfile), before mpirun/srun starts.
inline constexpr int kBadInput = 2;

}  // namespace stratum::distributed::launch
