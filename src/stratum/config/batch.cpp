#include "stratum/config/batch.h"

#include <initializer_list>
#include <utility>

#include "stratum/config/sections.h"
#include "stratum/core/error.h"

namespace stratum::config {
namespace {

std::string s(int64_t v) { return std::to_string(v); }

using Factor = std::pair<const char*, int64_t>;

// The product of named factors; one over 2^63 - 1 is refused, naming every
// factor (unchecked, a near-2^63 micro batch made train_batch_size -2 and passed).
int64_t product(std::initializer_list<Factor> factors, const std::string& source) {
  int64_t out = 1;
  bool overflow = false;
  for (const auto& [name, value] : factors) overflow = overflow || __builtin_mul_overflow(out, value, &out);
  if (!overflow) return out;
  std::string text;
  for (const auto& [name, value] : factors) text += (text.empty() ? "" : " x ") + std::string(name) + " " + s(value);
  throw ConfigError(source, {text + " is over the 64-bit limit 9223372036854775807; use realistic batch sizes"});
}

}  // namespace

// DeepSpeed's _set_batch_related_parameters + _batch_assertion, with errors
// that print the numbers.
BatchSizes resolve_batch(const BatchConfig& batch, int64_t dp, const std::string& source) {
  const auto& train = batch.train_batch_size;
  const auto& micro = batch.train_micro_batch_size_per_gpu;
  const auto& gas = batch.gradient_accumulation_steps;
  if (dp < 1) throw ConfigError(source, {"data-parallel size must be >= 1, got " + s(dp)});
  const Factor kMicro{"train_micro_batch_size_per_gpu", micro.value_or(0)};
  const Factor kGas{"gradient_accumulation_steps", gas.value_or(0)};
  const Factor kDp{"data-parallel size", dp};

  BatchSizes out;
  out.data_parallel_size = dp;
  if (train && micro && gas) {
    out = {*train, *micro, *gas, dp};
  } else if (train && micro) {
    const int64_t per_step = product({kMicro, kDp}, source);
    if (*train % per_step != 0)
      throw ConfigError(source, {"train_batch_size " + s(*train) + " is not divisible by train_micro_batch_size_per_gpu " +
                                 s(*micro) + " x data-parallel size " + s(dp) + " = " + s(per_step) +
                                 ", so gradient_accumulation_steps cannot be derived"});
    out = {*train, *micro, *train / per_step, dp};
  } else if (train && gas) {
    const int64_t per_micro = product({kGas, kDp}, source);
    if (*train % per_micro != 0)
      throw ConfigError(source, {"train_batch_size " + s(*train) + " is not divisible by gradient_accumulation_steps " +
                                 s(*gas) + " x data-parallel size " + s(dp) + " = " + s(per_micro) +
                                 ", so train_micro_batch_size_per_gpu cannot be derived"});
    out = {*train, *train / per_micro, *gas, dp};
  } else if (micro && gas) {
    out = {product({kMicro, kGas, kDp}, source), *micro, *gas, dp};
  } else if (train) {
    if (*train % dp != 0)
      throw ConfigError(source, {"train_batch_size " + s(*train) + " is not divisible by the data-parallel size " +
                                 s(dp)});
    out = {*train, *train / dp, 1, dp};
  } else if (micro) {
    out = {product({kMicro, kDp}, source), *micro, 1, dp};
  } else {
    throw ConfigError(source, {"train_batch_size: neither train_batch_size nor train_micro_batch_size_per_gpu is "
                               "given; give at least one"});
  }
  if (out.micro_batch_per_gpu < 1 || out.gradient_accumulation_steps < 1)
    throw ConfigError(source, {"train_micro_batch_size_per_gpu " + s(out.micro_batch_per_gpu) +
                               " and gradient_accumulation_steps " + s(out.gradient_accumulation_steps) +
                               " must both be >= 1"});
  const int64_t total = product({{"train_micro_batch_size_per_gpu", out.micro_batch_per_gpu},
                                 {"gradient_accumulation_steps", out.gradient_accumulation_steps},
                                 kDp},
                                source);
  if (out.train_batch_size != total)
    throw ConfigError(source, {"train_batch_size " + s(out.train_batch_size) +
                               " != train_micro_batch_size_per_gpu " + s(out.micro_batch_per_gpu) +
                               " x gradient_accumulation_steps " + s(out.gradient_accumulation_steps) +
                               " x data-parallel size " + s(dp) + " = " + s(total)});
  return out;
}

}  // namespace stratum::config
