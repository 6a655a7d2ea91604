#pragma once
// Metrics on disk, one row per optimizer step: CSV (the ds_config
// `csv_monitor` section: <output_path>/<job_name>/metrics.csv) and JSONL
// (metrics.jsonl beside it). Columns are fixed when the file is opened; a
// resumed run appends.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace stratum::monitor {

class MetricsLog {
 public:
  // Creates the directory; appends when the files exist (resume). Throws stratum::Error.
  MetricsLog(const std::string& directory, std::vector<std::string> columns);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Missing columns are left empty; unknown keys are an error (they would be lost).
  void write(const std::map<std::string, double>& row);
  const std::string& csv_path() const { return csv_path_; }
  const std::string& jsonl_path() const { return jsonl_path_; }

 private:
  std::vector<std::string> columns_;
  std::string csv_path_, jsonl_path_;
  FILE* csv_ = nullptr;
  FILE* jsonl_ = nullptr;
};

}  // namespace stratum::monitor
