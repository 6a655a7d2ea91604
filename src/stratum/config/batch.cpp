#include "stratum/config/batch.h"

#include "stratum/config/sections.h"
#include "stratum/core/error.h"

namespace stratum::config {

// DeepSpeed's _set_batch_related_parameters + _batch_assertion, with errors
// that print the numbers.
BatchSizes resolve_batch(const BatchConfig& batch, int64_t dp, const std::string& source) {
  const auto& train = batch.train_batch_size;
  const auto& micro = batch.train_micro_batch_size_per_gpu;
  const auto& gas = batch.gradient_accumulation_steps;
  auto s = [](int64_t v) { return std::to_string(v); };
  if (dp < 1) throw ConfigError(source, {"data-parallel size must be >= 1, got " + s(dp)});

  BatchSizes out;
  out.data_parallel_size = dp;
  if (train && micro && gas) {
    out = {*train, *micro, *gas, dp};
  } else if (train && micro) {
    if (*train % (*micro * dp) != 0)
      throw ConfigError(source, {"train_batch_size " + s(*train) + " is not divisible by train_micro_batch_size_per_gpu " +
                                 s(*micro) + " x data-parallel size " + s(dp) + " = " + s(*micro * dp) +
                                 ", so gradient_accumulation_steps cannot be derived"});
    out = {*train, *micro, *train / (*micro * dp), dp};
  } else if (train && gas) {
    if (*train % (*gas * dp) != 0)
      throw ConfigError(source, {"train_batch_size " + s(*train) + " is not divisible by gradient_accumulation_steps " +
                                 s(*gas) + " x data-parallel size " + s(dp) + " = " + s(*gas * dp) +
                                 ", so train_micro_batch_size_per_gpu cannot be derived"});
    out = {*train, *train / (*gas * dp), *gas, dp};
  } else if (micro && gas) {
    out = {*micro * *gas * dp, *micro, *gas, dp};
  } else if (train) {
    if (*train % dp != 0)
      throw ConfigError(source, {"train_batch_size " + s(*train) + " is not divisible by the data-parallel size " +
                                 s(dp)});
    out = {*train, *train / dp, 1, dp};
  } else if (micro) {
    out = {*micro * dp, *micro, 1, dp};
  } else {
    throw ConfigError(source, {"train_batch_size: neither train_batch_size nor train_micro_batch_size_per_gpu is "
                               "given; give at least one"});
  }
  if (out.micro_batch_per_gpu < 1 || out.gradient_accumulation_steps < 1 ||
      out.train_batch_size != out.micro_batch_per_gpu * out.gradient_accumulation_steps * dp)
    throw ConfigError(source, {"train_batch_size " + s(out.train_batch_size) +
                               " != train_micro_batch_size_per_gpu " + s(out.micro_batch_per_gpu) +
                               " x gradient_accumulation_steps " + s(out.gradient_accumulation_steps) +
                               " x data-parallel size " + s(dp) + " = " +
                               s(out.micro_batch_per_gpu * out.gradient_accumulation_steps * dp)});
  return out;
}

}  // namespace stratum::config
