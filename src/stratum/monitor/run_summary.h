#pragma once
// What a training run leaves beside its metrics when it ends: summary.json
// (the run's figures in one object) and loss_curve.svg (train and eval loss
// against the step), because people would rather look than read.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stratum/monitor/progress.h"

namespace stratum::monitor {

class RunSummary {
 public:
  void add_step(const StepMetrics& m, double grad_norm);
  void add_eval(int64_t step, double loss);

  // `about`: what the program knows of the run (model, parameters, layout...),
  // merged into the summary's top level.
  nlohmann::json to_json(const nlohmann::json& about, double wall_seconds) const;
  std::string loss_curve_svg(const std::string& title) const;
  // summary.json and loss_curve.svg in `directory`. Throws stratum::Error naming the file.
  void write(const std::string& directory, const nlohmann::json& about, double wall_seconds,
             const std::string& title) const;

 private:
  std::vector<std::pair<int64_t, double>> train_, eval_;
  std::vector<double> tokens_per_s_, mfu_;
  double peak_memory_gib_ = 0;
  int64_t skipped_ = 0;
  double last_grad_norm_ = 0;
};

}  // namespace stratum::monitor
