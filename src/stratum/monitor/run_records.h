#pragma once
// Everything a training run records beside its progress line, in one place
// for every way stratum-train runs (data parallel, pipelined): metrics.csv
// and metrics.jsonl (--log-dir, else the config's csv_monitor section),
// TensorBoard events (the tensorboard section), and when the run ends
// summary.json and loss_curve.svg beside the metrics (else beside the events).
// Only the reporting rank (`lead`) writes; the others keep nothing.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/monitor/metrics_log.h"
#include "stratum/monitor/progress.h"
#include "stratum/monitor/run_summary.h"
#include "stratum/monitor/tensorboard_writer.h"

namespace stratum::monitor {

class RunRecords {
 public:
  // `samples_per_step`: TensorBoard's x axis is samples, as DeepSpeed's
  // (Train/Samples/train_loss, ...). Throws stratum::Error naming a file that cannot be written.
  RunRecords(const Config& config, const std::string& log_dir, int64_t samples_per_step, bool lead);

  void step(const StepMetrics& m, double grad_norm, std::optional<double> eval_loss);
  // `about`: the run's model and layout, written into summary.json.
  void finish(const nlohmann::json& about, const std::string& title, double wall_seconds);

  const std::string& metrics_dir() const { return metrics_dir_; }
  const std::string& tensorboard_dir() const { return tensorboard_dir_; }

 private:
  bool lead_;
  int64_t samples_per_step_;
  std::string metrics_dir_, tensorboard_dir_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  RunSummary summary_;
};

}  // namespace stratum::monitor
