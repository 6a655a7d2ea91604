#pragma once
// What a training run shows while it runs: on a terminal, one line redrawn in
// place (step, loss, lr, loss scale, tokens/s, MFU, memory, ETA); elsewhere
// (logs, CI) plain lines every `print_every` steps. Rank 0 prints; others keep quiet.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace stratum::monitor {

struct StepMetrics {
  int64_t step = 0;         // optimizer steps done
  int64_t total_steps = 0;  // planned
  double loss = 0.0;
  double lr = 0.0;
  double loss_scale = 1.0;
  double tokens_per_second = 0.0;  // whole job
  double mfu = 0.0;                // fraction of peak, per device (0 if unknown)
  double memory_gib = 0.0;         // peak device memory (GPU) or resident set (CPU)
  // The rank whose memory_gib it is, when it is the largest of several ranks'.
  std::optional<int> memory_rank;
  bool skipped = false;            // fp16 overflow
  // Pipelines: the share of the step the reporting stage waited on others (measured).
  std::optional<double> bubble;
  std::optional<double> eval_loss;
  // A mixture of experts: the step's largest load over the mean (most tokens
  // an expert got / tokens an expert on average, worst layer) and the share of
  // assignments dropped over capacity.
  std::optional<double> expert_imbalance;
  std::optional<double> experts_dropped;
  // The lowest rank flagged as a straggler at this step (monitor/straggler.h), if any.
  std::optional<int> straggler;
};

class ProgressReporter {
 public:
  // `out` null: stdout. `terminal`: redraw in place (default: isatty(out)).
  ProgressReporter(int64_t print_every, FILE* out = nullptr, std::optional<bool> terminal = std::nullopt);
  void update(const StepMetrics& m);
  // A line that must stay (eval results, checkpoint saved): clears the live line first.
  void note(const std::string& line);
  void finish();

  static std::string format_eta(double seconds);
  static std::string format_line(const StepMetrics& m, double eta_seconds);

 private:
  FILE* out_;
  bool terminal_;
  int64_t print_every_;
  bool live_line_ = false;
  std::chrono::steady_clock::time_point start_;
  int64_t first_step_ = -1;
};

}  // namespace stratum::monitor
