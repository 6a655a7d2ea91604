#include "stratum/monitor/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace stratum::monitor {

ProgressReporter::ProgressReporter(int64_t print_every, FILE* out, std::optional<bool> terminal)
    : out_(out ? out : stdout), print_every_(print_every < 1 ? 1 : print_every), start_(std::chrono::steady_clock::now()) {
  // Under stratum-run every rank's stdout is a pty; the launcher says in STRATUM_TERMINAL what the user has.
  const char* env = std::getenv("STRATUM_TERMINAL");
  const bool tty = env && *env ? std::string(env) == "1" : ::isatty(::fileno(out_)) == 1;
  terminal_ = terminal.value_or(tty);
}

std::string ProgressReporter::format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  else std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

std::string ProgressReporter::format_line(const StepMetrics& m, double eta_seconds) {
  char buf[420];
  const double tps = m.tokens_per_second;
  const std::string tokens = tps >= 1e6 ? std::to_string(tps / 1e6).substr(0, 5) + "M"
                             : tps >= 1e3 ? std::to_string(tps / 1e3).substr(0, 5) + "k"
                                          : std::to_string(static_cast<int64_t>(tps));
  char mfu[16] = "-";  // unknown on CPUs
  if (m.mfu > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * m.mfu);
  std::string rank;
  if (m.memory_rank) rank = " (rank " + std::to_string(*m.memory_rank) + ")";
  std::string bubble;
  if (m.bubble) {
    char b[32];
    std::snprintf(b, sizeof b, " | bubble %.1f%%", 100.0 * *m.bubble);
    bubble = b;
  }
  if (m.expert_imbalance) {
    char b[64];
    if (m.experts_dropped && *m.experts_dropped > 0)
      std::snprintf(b, sizeof b, " | experts max/mean %.2f, dropped %.1f%%", *m.expert_imbalance,
                    100.0 * *m.experts_dropped);
    else
      std::snprintf(b, sizeof b, " | experts max/mean %.2f", *m.expert_imbalance);
    bubble += b;
  }
  std::snprintf(buf, sizeof buf,
                "step %lld/%lld | loss %.4f | lr %.3e | scale %g | tok/s %s | MFU %s | mem %.2f GiB%s%s | ETA %s%s",
                (long long)m.step, (long long)m.total_steps, m.loss, m.lr, m.loss_scale, tokens.c_str(), mfu,
                m.memory_gib, rank.c_str(), bubble.c_str(), format_eta(eta_seconds).c_str(),
                m.skipped ? " | skipped (fp16 overflow)" : "");
  return buf;
}

void ProgressReporter::update(const StepMetrics& m) {
  if (first_step_ < 0) {
    first_step_ = m.step - 1;
    start_ = std::chrono::steady_clock::now();
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = m.step - first_step_;
  const double eta = done > 0 ? elapsed / done * static_cast<double>(m.total_steps - m.step) : NAN;
  const std::string line = format_line(m, eta);
  if (terminal_) {
    // Width of the bar: what is left of 120 columns, within reason.
    const int width = 20;
    const int filled = m.total_steps > 0 ? static_cast<int>(width * m.step / m.total_steps) : 0;
    std::string bar(filled, '=');
    bar.resize(width, ' ');
    std::fprintf(out_, "\r\033[K[%s] %s", bar.c_str(), line.c_str());
    live_line_ = true;
    if (m.step == m.total_steps) {
      std::fputc('\n', out_);
      live_line_ = false;
    }
  } else if (m.step % print_every_ == 0 || m.step == m.total_steps || m.step == 1) {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressReporter::note(const std::string& line) {
  if (live_line_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  live_line_ = false;
  std::fflush(out_);
}

void ProgressReporter::finish() {
  if (live_line_) std::fputc('\n', out_);
  live_line_ = false;
  std::fflush(out_);
}

}  // namespace stratum::monitor
