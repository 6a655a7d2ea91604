#include "stratum/monitor/metrics_log.h"

#include <cmath>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::monitor {

MetricsLog::MetricsLog(const std::string& directory, std::vector<std::string> columns) : columns_(std::move(columns)) {
  fs::make_directories(directory);
  csv_path_ = directory + "/metrics.csv";
  jsonl_path_ = directory + "/metrics.jsonl";
  const bool existed = fs::exists(csv_path_);
  csv_ = std::fopen(csv_path_.c_str(), "a");
  jsonl_ = std::fopen(jsonl_path_.c_str(), "a");
  if (!csv_ || !jsonl_) throw Error(directory + ": cannot open metrics files for writing");
  if (!existed) {
    for (size_t i = 0; i < columns_.size(); ++i) std::fprintf(csv_, "%s%s", i ? "," : "", columns_[i].c_str());
    std::fputc('\n', csv_);
    std::fflush(csv_);
  }
}

MetricsLog::~MetricsLog() {
  if (csv_) std::fclose(csv_);
  if (jsonl_) std::fclose(jsonl_);
}

void MetricsLog::write(const std::map<std::string, double>& row) {
  for (const auto& [k, v] : row) {
    bool known = false;
    for (const auto& c : columns_) known |= c == k;
    if (!known) throw Error(csv_path_ + ": metric '" + k + "' is not one of the file's columns");
  }
  std::string json = "{";
  for (size_t i = 0; i < columns_.size(); ++i) {
    auto it = row.find(columns_[i]);
    if (i) std::fputc(',', csv_);
    if (it == row.end()) continue;
    std::fprintf(csv_, "%.9g", it->second);
    char buf[64];
    if (std::isfinite(it->second)) std::snprintf(buf, sizeof buf, "%.9g", it->second);
    else std::snprintf(buf, sizeof buf, "null");  // JSON has no inf/nan
    json += std::string(json.size() > 1 ? ", " : "") + "\"" + columns_[i] + "\": " + buf;
  }
  std::fputc('\n', csv_);
  std::fprintf(jsonl_, "%s}\n", json.c_str());
  std::fflush(csv_);
  std::fflush(jsonl_);
}

}  // namespace stratum::monitor
