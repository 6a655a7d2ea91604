// stratum-run: the launcher. DeepSpeed's launcher flags and hostfile; the ranks
// run under Open MPI's mpirun (the MPI backend needs MPI_COMM_WORLD, the NCCL
// backend bootstraps over MPI), or with --launcher slurm as one SLURM srun step.
// Nothing goes through a shell: mpirun/srun and the program are exec'd from argv
// vectors.
//
//   stratum-run [--launcher mpirun|slurm] [--hostfile F] [--include S | --exclude S]
//               [--num_nodes K] [--num_gpus N | --num_procs N] [--master_addr A]
//               [--master_port P] [--export NAME[=VALUE]]... PROGRAM [ARGS...]
//
// How it works:
// - The flags become one mpirun app context per host: `-np N --host NAME:N
//   -x VAR=VALUE... <this program> --rank-shim --node NAME --node_rank I
//   [--devices 0,2] -- PROGRAM ARGS` (src/stratum/distributed/launch/mpirun_command.h).
// - --launcher slurm makes them one srun command, as DeepSpeed's SlurmRunner:
//   `srun [-n N] [--ntasks-per-node=P] [-N K] [-w HOSTS] [-x HOSTS]
//   [--gpus-per-node=G] [--comment C] --mpi=pmix --kill-on-bad-exit=1
//   --quit-on-interrupt --export=ALL,VAR=VALUE... <this program> --rank-shim
//   --slurm -- PROGRAM ARGS` (launch/srun_command.h). -n is the hostfile's
//   selected slots, or --num_gpus/--num_procs times --num_nodes; inside an
//   allocation without them, srun's own count. --include/--exclude name whole
//   hosts. Debian's Open MPI joins srun's world only through PMIx.
// - The shim (this program with --rank-shim, one per rank) sets RANK,
//   LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE (from OMPI_COMM_WORLD_*, or srun's
//   SLURM_PROCID etc.), NODE_RANK, CUDA_VISIBLE_DEVICES (mpirun's GPU launches:
//   the host's chosen slots; srun's tasks see their node's GPUs) and
//   STRATUM_OUTPUT_PREFIXED=1, then forks the program into the shim's process
//   group (mpirun signals that group, slurmstepd every process of the step, so
//   the program gets them directly; other senders' signals the shim forwards),
//   relays its stdout (over a pty when mpirun gave the shim one, and always
//   under srun, keeping the program line-buffered) and
//   stderr with "[rank N] " before each line (--log_dir also keeps unprefixed
//   copies in DIR/rank_N.log; --no_prefix passes output through), and when the
//   program fails prints `stratum-run: rank 1 (host node2, local rank 1) exited
//   with status 3` (or `killed by signal 9 (SIGKILL)`) and exits with that status
//   (128 + signal), upon which mpirun stops the other ranks (SIGCONT, wait,
//   SIGTERM, wait, SIGKILL; the wait is --grace_period), or srun kills the step.
//   A rank that was told to stop is not reported.
// - The launcher relays mpirun's (srun's) stderr, remembers the first rank a shim
//   named, forwards SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 to it (not a terminal's
//   ^C, which it gets itself; srun ends the step on SIGINT, SIGTERM and SIGHUP),
//   and ends with `stratum-run: job failed: <that rank's line> (mpirun exited with
//   status S)` (`srun exited ...`) and that status, or `job stopped by SIGTERM`
//   and 128 + signal. Bad input: `stratum-run: error: ...`, exit 2, before
//   mpirun/srun starts. mpirun/srun gets PR_SET_PDEATHSIG=SIGTERM, so the job
//   stops even if the launcher is killed outright.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "stratum/build_info.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/heartbeat.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/mpirun_command.h"
#include "stratum/distributed/launch/process.h"
#include "stratum/distributed/launch/rank_shim.h"
#include "stratum/distributed/launch/resources.h"
#include "stratum/distributed/launch/srun_command.h"

extern char** environ;

namespace launch = stratum::distributed::launch;

namespace {

constexpr int kBadInput = 2;

long long now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void say(const std::string& line) { launch::write_all(STDERR_FILENO, "stratum-run: " + line + "\n"); }

const char* env_or_null(const char* name) { return ::getenv(name); }

std::vector<std::string> environ_entries() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

std::string this_host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !launch::is_valid_hostname(buf)) return "127.0.0.1";
  return buf;
}

// ---------------------------------------------------------------------------
// The rank shim: one per rank, started by mpirun or srun.
// ---------------------------------------------------------------------------

// A pty for the program's stdout when ours is one (mpirun gives ranks a pty, so
// programs keep line-buffered output), else a pipe. Returns {read end, write end}.
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
          launch::set_nonblocking(master);
          return {master, slave};
        }
      }
    }
    if (master >= 0) ::close(master);
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw stratum::Error(std::string("pipe: ") + std::strerror(errno));
  launch::set_nonblocking(p[0]);
  return {p[0], p[1]};
}

int run_rank_shim(int argc, char** argv) {
  launch::ShimArgs args;
  launch::RankInfo rank;
  try {
    args = launch::parse_shim_arguments(std::vector<std::string>(argv + 2, argv + argc));
    rank = launch::shim_rank_info(args, env_or_null, this_host_name());
    for (const auto& [k, v] : launch::rank_environment(rank, args, env_or_null)) setenv(k.c_str(), v.c_str(), 1);
  } catch (const stratum::Error& e) {
    say(std::string("error: ") + e.what());
    return kBadInput;
  }
  const std::string who = "rank " + std::to_string(rank.rank) + " (host " + args.node + ", local rank " +
                          std::to_string(rank.local_rank) + ")";

  int log_fd = -1;
  if (!args.log_dir.empty()) {
    try {
      stratum::fs::make_directories(args.log_dir);
    } catch (const stratum::Error&) {
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

  launch::SignalPipe signals({SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD});
  int out_r = -1, out_w = -1, err_r = -1, err_w = -1;
  launch::SpawnOptions spawn;
  spawn.argv = args.program;
  spawn.parent_death_signal = SIGKILL;
  // The program's heartbeat socket (core/heartbeat.h): signs of progress, and
  // word that it ends because another rank failed.
  int beats[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, beats) == 0) {
    fcntl(beats[0], F_SETFD, FD_CLOEXEC);
    launch::set_nonblocking(beats[0]);
    spawn.set_env.emplace_back(stratum::heartbeat::kFdVariable, std::to_string(beats[1]));
  }
  if (relay) {
    // srun hands tasks pipes: a pty of our own keeps the program line-buffered, as under mpirun.
    std::tie(out_r, out_w) = output_channel(isatty(STDOUT_FILENO) == 1 || args.slurm);
    std::tie(err_r, err_w) = output_channel(false);
    spawn.stdout_fd = out_w;
    spawn.stderr_fd = err_w;
  }
  pid_t child = -1;
  try {
    child = launch::spawn(spawn);
  } catch (const stratum::Error& e) {
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
  long long last_beat = now_ms();

  launch::LinePrefixer out_prefix(launch::rank_prefix(rank)), err_prefix(launch::rank_prefix(rank));
  auto deliver = [&](int to_fd, launch::LinePrefixer& prefixer, std::string_view data) {
    if (log_fd >= 0) launch::write_all(log_fd, data);
    if (args.prefix) {
      launch::write_all(to_fd, prefixer.feed(data));
    } else if (log_fd < 0) {
      launch::write_all(to_fd, data);
    }
  };
  auto flush_partials = [&] {
    if (!args.prefix) return;
    if (out_prefix.has_partial()) launch::write_all(STDOUT_FILENO, out_prefix.take_partial());
    if (err_prefix.has_partial()) launch::write_all(STDERR_FILENO, err_prefix.take_partial());
  };
  auto finish_stream = [&](int i) {
    if (args.prefix) launch::write_all(i == 1 ? STDOUT_FILENO : STDERR_FILENO, (i == 1 ? out_prefix : err_prefix).finish());
  };

  bool exited = false, stop_requested = false;
  int status = 0;
  long long drain_deadline = 0;
  while (true) {
    if (exited && ((out_r < 0 && err_r < 0) || now_ms() >= drain_deadline)) break;
    pollfd fds[4] = {{signals.fd(), POLLIN, 0}, {out_r, POLLIN, 0}, {err_r, POLLIN, 0}, {beat_fd, POLLIN, 0}};
    int timeout = 1000;
    if (out_prefix.has_partial() || err_prefix.has_partial()) timeout = 100;
    if (exited) timeout = static_cast<int>(std::min<long long>(timeout, std::max(0LL, drain_deadline - now_ms())));
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
        last_beat = now_ms();
        for (ssize_t k = 0; k < n; ++k) {
          if (buf[k] == stratum::heartbeat::kStartWatch) watching = true;
          if (buf[k] == stratum::heartbeat::kPeerFailed) peer_failed = true;
        }
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(beat_fd);
        beat_fd = -1;
      }
    }
    if (!exited && !hung && watching && args.heartbeat_timeout_s > 0 &&
        now_ms() - last_beat > 1000LL * args.heartbeat_timeout_s) {
      hung = true;
      launch::write_all(STDERR_FILENO, launch::rank_hang_line(rank, args) + "\n");
      kill(child, SIGKILL);
    }
    if (!exited) {
      const pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) {
        exited = true;
        drain_deadline = now_ms() + 1000;  // a background grandchild may hold the pipes open
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
  if (!stop_requested) launch::write_all(STDERR_FILENO, launch::rank_failure_line(rank, args, status) + "\n");
  return launch::exit_code_of(status);
}

// ---------------------------------------------------------------------------
// The launcher.
// ---------------------------------------------------------------------------

struct Flags {
  std::string hostfile, include, exclude, master_addr, launcher_agent, launcher_args, log_dir, comment;
  std::string launcher = "mpirun";
  std::string mpirun = "mpirun";
  std::string srun = "srun";
  std::optional<int> num_nodes, num_gpus, num_procs;
  int master_port = 29500;
  int grace_period = 1;
  bool grace_period_given = false;
  int heartbeat_timeout = 120;
  std::vector<std::string> exports;
  bool no_prefix = false, dry_run = false;
  std::vector<std::string> program;
};

std::string describe_hosts(const std::vector<launch::SelectedHost>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    out += (out.empty() ? "" : ", ") + h.name + " [";
    for (size_t i = 0; i < h.devices.size(); ++i) out += (i ? "," : "") + h.devices[i];
    out += "]";
  }
  return out;
}

// A count flag in 1..max: past the bound, slot lists would grow to gigabytes.
void check_count(const char* flag, const std::optional<int>& value, int max, const char* per) {
  if (!value) return;
  if (*value < 1) throw stratum::Error(std::string(flag) + " must be at least 1, got " + std::to_string(*value));
  if (*value > max)
    throw stratum::Error(std::string(flag) + " " + std::to_string(*value) + " is over the limit of " +
                         std::to_string(max) + per);
}

// What every rank gets, whichever launcher starts it.
struct RankSettings {
  std::vector<launch::EnvVar> exports;
  int master_port = 29500;
  std::vector<std::string> launcher_args;
  std::string log_dir, shim;
  bool prefix = true;
  int heartbeat_timeout_s = 0;
  std::vector<std::string> program;
};

RankSettings rank_settings(const Flags& f) {
  RankSettings s;
  if (f.program.empty()) throw stratum::Error("no program given: stratum-run [flags] PROGRAM [ARGS...]");
  if (f.num_gpus && f.num_procs) throw stratum::Error("--num_gpus and --num_procs cannot be used together");
  check_count("--num_gpus", f.num_gpus, launch::kMaxSlotsPerHost, " per host");
  check_count("--num_procs", f.num_procs, launch::kMaxSlotsPerHost, " per host");
  check_count("--num_nodes", f.num_nodes, launch::kMaxHostfileLines, " hosts");
  if (f.master_port < 1 || f.master_port > 65535)
    throw stratum::Error("--master_port must be in 1..65535, got " + std::to_string(f.master_port));
  s.master_port = f.master_port;

  s.exports = launch::passthrough_exports(environ_entries());
  for (const auto& [k, v] : launch::parse_exports(f.exports, env_or_null)) {
    bool replaced = false;
    for (auto& e : s.exports)
      if (e.first == k) e.second = v, replaced = true;
    if (!replaced) s.exports.emplace_back(k, v);
  }
  if (const char* nvls = ::getenv("NCCL_NVLS_ENABLE"); nvls && std::string(nvls) != "0")
    say("warning: NCCL_NVLS_ENABLE=" + std::string(nvls) + " in the environment is overridden: ranks get NCCL_NVLS_ENABLE=0");

  std::istringstream words(f.launcher_args);
  for (std::string w; words >> w;) s.launcher_args.push_back(w);
  if (!f.log_dir.empty()) {
    s.log_dir = stratum::fs::absolute_path(f.log_dir);
    stratum::fs::make_directories(s.log_dir);  // throws, naming the path
  }
  s.prefix = !f.no_prefix;
  if (f.heartbeat_timeout < 0 || f.heartbeat_timeout > 7 * 86400)
    throw stratum::Error("--heartbeat_timeout must be 0 (off) .. 604800 seconds, got " + std::to_string(f.heartbeat_timeout));
  s.heartbeat_timeout_s = f.heartbeat_timeout;
  s.shim = launch::self_executable();
  s.program = f.program;
  return s;
}

launch::SelectionRequest selection_request(const Flags& f) {
  launch::SelectionRequest request;
  request.include = f.include;
  request.exclude = f.exclude;
  request.num_nodes = f.num_nodes;
  request.per_node = f.num_procs ? f.num_procs : f.num_gpus;
  request.per_node_flag = f.num_procs ? "--num_procs" : "--num_gpus";
  return request;
}

launch::LaunchPlan make_mpirun_plan(const Flags& f, const RankSettings& s) {
  if (!f.comment.empty()) throw stratum::Error("--comment is passed to srun (--launcher slurm); mpirun has none");
  launch::LaunchPlan plan;
  launch::SelectionRequest request = selection_request(f);
  std::vector<launch::PoolHost> pool;
  if (!f.hostfile.empty()) {
    pool = launch::pool_from_hostfile(launch::read_hostfile(f.hostfile));
    plan.gpu = !f.num_procs;
  } else {
    const auto gpus = launch::detect_local_gpus();
    plan.gpu = !f.num_procs && !gpus.devices.empty();
    if (plan.gpu) {
      pool.push_back(launch::make_pool_host("localhost", static_cast<int>(gpus.devices.size()), gpus.devices));
      if (f.num_gpus && *f.num_gpus > static_cast<int>(gpus.devices.size()))
        throw stratum::Error("--num_gpus " + std::to_string(*f.num_gpus) + ": this machine has " +
                             std::to_string(gpus.devices.size()) + " GPU" + (gpus.devices.size() == 1 ? "" : "s") +
                             " (" + gpus.source + ")");
    } else {
      if (f.num_gpus)
        throw stratum::Error("--num_gpus " + std::to_string(*f.num_gpus) + ": no GPUs found on this machine (" +
                             gpus.source + "); use --num_procs N for CPU ranks");
      pool.push_back(launch::make_pool_host("localhost", f.num_procs.value_or(2)));
      request.per_node.reset();  // the pool holds just the --num_procs ranks
    }
  }
  plan.hosts = launch::select_resources(pool, request);

  plan.master_addr = f.master_addr.empty() ? launch::default_master_addr(plan.hosts, this_host_name()) : f.master_addr;
  launch::check_hostname(plan.master_addr, "--master_addr");
  plan.master_port = s.master_port;
  plan.exports = s.exports;

  const auto mpirun = launch::find_program(f.mpirun);
  if (!mpirun)
    throw stratum::Error("--mpirun '" + f.mpirun + "': not found (stratum-run needs Open MPI's mpirun; install it or "
                         "pass its path)");
  plan.mpirun = *mpirun;
  if (!f.launcher_agent.empty()) {
    const auto agent = launch::find_program(f.launcher_agent);
    if (!agent) throw stratum::Error("--launcher_agent '" + f.launcher_agent + "': not found or not executable");
    plan.launcher_agent = stratum::fs::absolute_path(*agent);
  }
  plan.launcher_args = s.launcher_args;
  plan.log_dir = s.log_dir;
  plan.prefix_output = s.prefix;
  if (f.grace_period < 1) throw stratum::Error("--grace_period must be at least 1 second");
  plan.grace_period_s = f.grace_period;
  plan.heartbeat_timeout_s = s.heartbeat_timeout_s;
  plan.shim = s.shim;
  plan.program = s.program;

  bool all_local = true;
  for (const auto& h : plan.hosts) all_local = all_local && launch::is_local_name(h.name);
  if (all_local && !launch::find_program(plan.program.front()))
    throw stratum::Error("program '" + plan.program.front() + "' not found" +
                         (plan.program.front().find('/') == std::string::npos ? " in PATH" : "") +
                         " or not executable");
  return plan;
}

// srun's rank count (-n): the hostfile's selected slots; else the per-node
// count times the nodes; else the allocation's (left to srun); else, making a
// new allocation, this machine's GPU count or 2 CPU ranks per node.
std::optional<int> srun_task_count(const Flags& f) {
  const launch::SelectionRequest request = selection_request(f);
  launch::check_selection_request(request);
  if (!f.hostfile.empty()) {
    const auto pool = launch::pool_from_hostfile(launch::read_hostfile(f.hostfile));
    int ranks = 0;
    for (const auto& h : launch::select_resources(pool, request)) ranks += static_cast<int>(h.slots.size());
    return ranks;
  }
  const int nodes = f.num_nodes.value_or(1);
  if (request.per_node) return *request.per_node * nodes;
  if (::getenv("SLURM_JOB_ID")) return std::nullopt;
  const auto gpus = launch::detect_local_gpus();
  return (gpus.devices.empty() ? 2 : static_cast<int>(gpus.devices.size())) * nodes;
}

launch::SrunPlan make_srun_plan(const Flags& f, const RankSettings& s) {
  const char* agent_env = ::getenv("STRATUM_LAUNCHER_AGENT");
  if (!f.launcher_agent.empty() && !(agent_env && f.launcher_agent == agent_env))
    throw stratum::Error("--launcher_agent is mpirun's (it replaces ssh); srun reaches the nodes through slurmd");
  if (f.grace_period_given)
    throw stratum::Error("--grace_period is Open MPI's; under srun a stopped step gets SIGKILL (SLURM's KillWait "
                         "applies to cancelled jobs)");
  launch::SrunPlan plan;
  const auto srun = launch::find_program(f.srun);
  if (!srun)
    throw stratum::Error("--srun '" + f.srun + "': not found (--launcher slurm needs SLURM's srun: install SLURM's "
                         "client commands, or pass its path with --srun or STRATUM_SRUN)");
  plan.srun = *srun;
  plan.tasks = srun_task_count(f);
  if (f.num_gpus || f.num_procs) plan.tasks_per_node = f.num_gpus ? f.num_gpus : f.num_procs;
  plan.nodes = f.num_nodes;
  plan.gpus_per_node = f.num_gpus;
  plan.nodelist = launch::srun_host_list(f.include, "--include");
  plan.exclude = launch::srun_host_list(f.exclude, "--exclude");
  plan.comment = f.comment;

  plan.master_addr = f.master_addr.empty() ? launch::srun_master_addr(plan.nodelist, plan.exclude,
                                                                      ::getenv("SLURM_JOB_NODELIST"), this_host_name())
                                           : f.master_addr;
  launch::check_hostname(plan.master_addr, "--master_addr");
  plan.master_port = s.master_port;
  // srun's --export list splits at ','. A value with one that this process
  // already holds reaches the ranks anyway: srun passes its environment on (ALL).
  for (const auto& [k, v] : s.exports) {
    const char* here = ::getenv(k.c_str());
    if (v.find(',') != std::string::npos && here && v == here) continue;
    plan.exports.emplace_back(k, v);
  }
  plan.launcher_args = s.launcher_args;
  plan.log_dir = s.log_dir;
  plan.prefix_output = s.prefix;
  plan.heartbeat_timeout_s = s.heartbeat_timeout_s;
  plan.shim = s.shim;
  plan.program = s.program;
  return plan;
}

std::string describe_srun_plan(const launch::SrunPlan& plan) {
  std::string out = plan.tasks ? std::to_string(*plan.tasks) + (*plan.tasks == 1 ? " rank" : " ranks")
                               : std::string("the allocation's ranks");
  out += " through srun";
  if (plan.tasks_per_node) out += ", " + std::to_string(*plan.tasks_per_node) + " per node";
  if (plan.nodes) out += ", " + std::to_string(*plan.nodes) + (*plan.nodes == 1 ? " node" : " nodes");
  if (!plan.nodelist.empty()) out += ", on " + launch::format_command(plan.nodelist);
  if (!plan.exclude.empty()) out += ", not on " + launch::format_command(plan.exclude);
  return out + "; MASTER_ADDR=" + plan.master_addr + " MASTER_PORT=" + std::to_string(plan.master_port);
}

// Runs the launcher process (mpirun or srun, named `name` in messages), relaying
// its stderr (where the shims name failed ranks) and forwarding
// SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 to it.
int run_launcher_process(const std::vector<std::string>& argv, const std::string& name,
                         const std::vector<launch::EnvVar>& env) {
  launch::SignalPipe signals({SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD});
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) throw stratum::Error(std::string("pipe: ") + std::strerror(errno));
  launch::set_nonblocking(err[0]);
  launch::SpawnOptions spawn;
  spawn.argv = argv;
  spawn.set_env = env;
  spawn.stderr_fd = err[1];
  spawn.parent_death_signal = SIGTERM;  // if stratum-run is killed outright, mpirun/srun still stops the job
  const pid_t child = launch::spawn(spawn);
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
    if (exited && (err_fd < 0 || now_ms() >= drain_deadline)) break;
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {err_fd, POLLIN, 0}};
    int timeout = 1000;
    if (exited) timeout = static_cast<int>(std::max(0LL, drain_deadline - now_ms()));
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
      drain_deadline = now_ms() + 2000;
    }
    if (err_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char buf[65536];
      const ssize_t n = ::read(err_fd, buf, sizeof buf);
      if (n > 0) {
        launch::write_all(STDERR_FILENO, std::string_view(buf, static_cast<size_t>(n)));
        scan(std::string_view(buf, static_cast<size_t>(n)));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(err_fd);
        err_fd = -1;
      }
    }
  }
  if (err_fd >= 0) ::close(err_fd);

  const std::string result = name + " " + launch::describe_wait_status(status);
  if (stop_signal) {
    say("job stopped by " + launch::signal_name(*stop_signal) + " (" + result + ")");
    return 128 + *stop_signal;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  say("job failed: " + (failure ? *failure + " (" + result + ")" : result));
  const int code = launch::exit_code_of(status);
  return code == 0 ? 1 : code;
}

// `--launcher`: DeepSpeed's flag, with the two launchers Stratum has.
std::optional<std::string> launcher_name(const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "mpirun" || v == "slurm") return v;
  return std::nullopt;
}

int run_launcher(int argc, char** argv) {
  // Ranks' stdout is a pty (mpirun's, or the shim's under srun) whatever the user's is: tell them what the user sees
  // (progress bars redraw only on a real terminal). Passed on like every STRATUM_ variable.
  ::setenv("STRATUM_TERMINAL", ::isatty(STDOUT_FILENO) == 1 ? "1" : "0", /*overwrite=*/0);
  CLI::App app{"Start one process per device (per CPU rank without GPUs) on one or many hosts, through Open MPI's "
               "mpirun or, with --launcher slurm, SLURM's srun, with DeepSpeed's launcher flags and hostfile.\n"
               "Every rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT "
               "(and CUDA_VISIBLE_DEVICES on mpirun's GPU launches); its output lines start with \"[rank N] \"."};
  app.set_version_flag("--version", std::string("stratum ") + STRATUM_VERSION + " (" + STRATUM_GIT_SHA + ")");
  app.prefix_command();
  app.footer(
      "PROGRAM [ARGS...] follows the flags ('--' may separate them) and is run as given, without a shell.\n"
      "Without --hostfile the job runs on this machine: one rank per GPU, or --num_procs CPU ranks (2 by default)\n"
      "where there is no GPU. A failing rank stops the job; stratum-run names it and exits non-zero.\n"
      "--launcher slurm runs one srun step (srun -n N [-N K] [-w/-x hosts] [--gpus-per-node=G] --mpi=pmix\n"
      "--kill-on-bad-exit=1 --export=ALL,...): inside an allocation (sbatch, salloc) it uses the allocation's tasks\n"
      "unless --num_gpus/--num_procs (per node) or --hostfile say how many; --include/--exclude name whole hosts.\n"
      "Examples:\n"
      "  stratum-run --num_gpus 4 ./train --config ds_config.json\n"
      "  stratum-run --hostfile hosts --include 'node1:0,2@node2' ./train --config ds_config.json\n"
      "  stratum-run --num_procs 4 ./train --config ds_config.json   # CPU ranks, MPI backend\n"
      "  stratum-run --launcher slurm --num_nodes 2 --num_gpus 8 ./train --config ds_config.json   # in an allocation");
  Flags f;
  app.add_option("--launcher", f.launcher,
                 "mpirun (Open MPI, one app context per host) or slurm (one srun step, in or making an allocation)")
      ->capture_default_str();
  app.add_option("-H,--hostfile", f.hostfile, "DeepSpeed hostfile: lines 'hostname slots=N', '#' comments");
  app.add_option("-i,--include", f.include,
                 "Use only these hosts/slots, e.g. 'host1:0,2@host2' (slurm: whole hosts, srun -w)");
  app.add_option("-e,--exclude", f.exclude, "Leave out these hosts/slots, e.g. 'host1:0@host2' (slurm: srun -x)");
  app.add_option("--num_nodes", f.num_nodes, "Use the first K hosts (slurm: srun -N K)");
  app.add_option("--num_gpus", f.num_gpus,
                 "GPUs (ranks) per host: the first N slots (slurm: --ntasks-per-node and --gpus-per-node N)");
  app.add_option("--num_procs", f.num_procs,
                 "CPU ranks per host (GPU-less runs; default 2 on a machine without GPUs); no CUDA_VISIBLE_DEVICES");
  app.add_option("--master_addr", f.master_addr,
                 "MASTER_ADDR for every rank (default: 127.0.0.1, or the first host; slurm: the first host of -w or "
                 "of the allocation, else this host)");
  app.add_option("--master_port", f.master_port, "MASTER_PORT for every rank")->capture_default_str();
  app.add_option("--export", f.exports, "Export NAME (its value here) or NAME=VALUE to every rank; repeatable")
      ->allow_extra_args(false);  // one value per --export: the program follows
  app.add_option("--launcher_agent", f.launcher_agent,
                 "Program mpirun uses instead of ssh to reach other hosts (Open MPI's plm_rsh_agent)")
      ->envname("STRATUM_LAUNCHER_AGENT");
  app.add_option("--launcher_args", f.launcher_args, "Extra mpirun (or srun) arguments, split at spaces (no quoting)");
  app.add_option("--mpirun", f.mpirun, "The mpirun to use")->envname("STRATUM_MPIRUN")->capture_default_str();
  app.add_option("--srun", f.srun, "The srun to use (--launcher slurm)")
      ->envname("STRATUM_SRUN")
      ->capture_default_str();
  app.add_option("--comment", f.comment, "Passed to srun as --comment (--launcher slurm), as DeepSpeed does");
  app.add_option("--log_dir", f.log_dir, "Also write each rank's output to DIR/rank_<N>.log (on its host)");
  app.add_flag("--no_prefix", f.no_prefix, "Do not put \"[rank N] \" before output lines");
  app.add_option("--grace_period", f.grace_period,
                 "When the job is stopped, Open MPI sends SIGCONT, waits this long, SIGTERM, waits again, "
                 "then SIGKILL (its odls_base_sigkill_timeout; mpirun only)")
      ->capture_default_str();
  app.add_option("--heartbeat_timeout,--heartbeat-timeout", f.heartbeat_timeout,
                 "End the job when a training rank makes no progress for this many seconds, naming it (0: off). "
                 "Ranks waiting on a stuck peer keep beating; checked from a program's first training step")
      ->capture_default_str();
  app.add_flag("--dry_run", f.dry_run, "Print the mpirun (or srun) command and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    say(std::string("error: ") + e.what());
    return kBadInput;
  }
  f.grace_period_given = app.count("--grace_period") > 0;
  f.program = app.remaining();
  if (!f.program.empty() && f.program.front() == "--") f.program.erase(f.program.begin());
  else if (!f.program.empty() && f.program.front().size() > 1 && f.program.front()[0] == '-') {
    say("error: unknown flag '" + f.program.front() + "' (see --help; put the program after '--' if it starts with '-')");
    return kBadInput;
  }
  const auto launcher = launcher_name(f.launcher);
  if (!launcher) {
    say("error: --launcher '" + f.launcher + "': stratum-run supports mpirun (Open MPI, the default) and slurm "
        "(srun); DeepSpeed's pdsh, openmpi, mvapich, mpich, impi and jsrun launchers are not available");
    return kBadInput;
  }

  std::vector<std::string> command;
  std::vector<launch::EnvVar> env;  // for mpirun/srun itself
  std::string summary;
  try {
    const RankSettings settings = rank_settings(f);
    if (*launcher == "slurm") {
      const launch::SrunPlan plan = make_srun_plan(f, settings);
      command = launch::build_srun_argv(plan);
      summary = describe_srun_plan(plan);
    } else {
      const launch::LaunchPlan plan = make_mpirun_plan(f, settings);
      command = launch::build_mpirun_argv(plan);
      env = launch::mpirun_environment(geteuid() == 0);
      int ranks = 0;
      for (const auto& h : plan.hosts) ranks += static_cast<int>(h.slots.size());
      summary = std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " on " + std::to_string(plan.hosts.size()) +
                (plan.hosts.size() == 1 ? " host" : " hosts") + (plan.gpu ? " (GPU slots): " : " (CPU ranks): ") +
                describe_hosts(plan.hosts) + "; MASTER_ADDR=" + plan.master_addr + " MASTER_PORT=" +
                std::to_string(plan.master_port);
    }
  } catch (const stratum::Error& e) {
    say(std::string("error: ") + e.what());
    return kBadInput;
  }
  if (f.dry_run) {
    std::string prefix;
    for (const auto& [k, v] : env) prefix += k + "=" + v + " ";
    std::cout << prefix << launch::format_command(command) << std::endl;
    return 0;
  }
  say(summary);
  try {
    return run_launcher_process(command, *launcher == "slurm" ? "srun" : "mpirun", env);
  } catch (const stratum::Error& e) {
    say(std::string("error: ") + e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == launch::kRankShimFlag) return run_rank_shim(argc, argv);
  return run_launcher(argc, argv);
}
