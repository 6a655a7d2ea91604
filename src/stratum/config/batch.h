#pragma once
// The batch triple: train_batch_size = micro_batch_per_gpu x gradient_accumulation_steps
// x data_parallel_size, resolved as DeepSpeed does (any two give the third).
#include <cstdint>
#include <optional>
#include <string>

namespace stratum::config {

struct BatchConfig;

struct BatchSizes {
  int64_t train_batch_size = 0;
  int64_t micro_batch_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  int64_t data_parallel_size = 0;
};

// Throws ConfigError (source names the file) with the numbers when they do not fit.
BatchSizes resolve_batch(const BatchConfig& batch, int64_t data_parallel_size, const std::string& source);

}  // namespace stratum::config
