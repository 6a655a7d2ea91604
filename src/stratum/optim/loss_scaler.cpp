#include "stratum/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include <ATen/ops/amax.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include "stratum/core/error.h"
#include "stratum/core/log.h"

namespace stratum::optim {
namespace {

constexpr double kScaleFactor = 2.0;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace

LossScaler::LossScaler(const config::Fp16Config& fp16, bool log_messages)
    : dynamic_(fp16.enabled && fp16.dynamic()),
      min_scale_(fp16.min_loss_scale),
      window_(fp16.loss_scale_window),
      hysteresis_(fp16.hysteresis),
      consecutive_hysteresis_(fp16.consecutive_hysteresis),
      log_messages_(log_messages) {
  if (!fp16.enabled)
    state_.cur_scale = 1.0;
  else if (dynamic_)
    state_.cur_scale = std::ldexp(1.0, static_cast<int>(fp16.initial_scale_power));
  else
    state_.cur_scale = fp16.loss_scale;
  state_.cur_hysteresis = hysteresis_;
}

bool LossScaler::update(bool overflow) {
  LossScalerState& s = state_;
  const std::string at_step = overflow ? "fp16: gradient overflow at step " + std::to_string(s.cur_iter) : "";
  auto say = [&](const std::string& m) {
    if (log_messages_) log::warn(m);
  };

  if (!dynamic_) {
    if (overflow) say(at_step + ", skipping it; static loss scale " + num(s.cur_scale) + " (fp16.loss_scale)");
    ++s.cur_iter;
    return overflow;
  }

  if (overflow) {
    if (s.cur_scale <= min_scale_) {
      // Nothing left to lower: tolerate hysteresis_ - 1 consecutive overflows here.
      // cur_hysteresis still counts down as in DeepSpeed (it only matters there).
      ++s.overflows_at_min;
      if (s.cur_hysteresis > 1) --s.cur_hysteresis;
      if (s.overflows_at_min >= hysteresis_)
        throw Error(at_step + " at the minimum loss scale " + num(min_scale_) + " (fp16.min_loss_scale), " +
                    std::to_string(s.overflows_at_min) +
                    " in a row: training diverges; lower the learning rate, use bf16, or lower "
                    "fp16.min_loss_scale");
      const int64_t left = hysteresis_ - s.overflows_at_min;
      say(at_step + ", skipping it; loss scale already at the minimum " + num(min_scale_) +
          " (fp16.min_loss_scale): " + std::to_string(left) + " more in a row stops training");
    } else if (hysteresis_ == 1 || s.cur_hysteresis == 1) {
      const double next = std::max(s.cur_scale / kScaleFactor, min_scale_);
      say(at_step + ", skipping it; loss scale " + num(s.cur_scale) + " -> " + num(next));
      s.cur_scale = next;
    } else {
      say(at_step + ", skipping it; loss scale stays " + num(s.cur_scale) + " (hysteresis " +
          std::to_string(s.cur_hysteresis) + " -> " + std::to_string(s.cur_hysteresis - 1) + ")");
      --s.cur_hysteresis;
    }
    s.last_overflow_iter = s.cur_iter;
  } else {
    s.overflows_at_min = 0;
    if (consecutive_hysteresis_) s.cur_hysteresis = hysteresis_;
    const int64_t stable_interval = s.cur_iter - s.last_overflow_iter - 1;
    if (stable_interval > 0 && stable_interval % window_ == 0) {
      if (!consecutive_hysteresis_) s.cur_hysteresis = hysteresis_;
      if (log_messages_)
        log::debug("fp16: " + std::to_string(window_) + " steps without overflow, loss scale " + num(s.cur_scale) +
                   " -> " + num(s.cur_scale * kScaleFactor));
      s.cur_scale *= kScaleFactor;
    }
  }
  ++s.cur_iter;
  return overflow;
}

at::Tensor local_overflow_flag(const std::vector<at::Tensor>& grads) {
  if (grads.empty()) return at::zeros({1}, at::kFloat);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<at::Tensor> max_abs;
  max_abs.reserve(grads.size());
  // max |g| is inf with an inf and nan with a nan, and exact otherwise.
  for (const at::Tensor& g : grads)
    if (g.numel() > 0) max_abs.push_back(at::linalg_vector_norm(g, kInf).to(at::kFloat));
  if (max_abs.empty()) return at::zeros({1}, grads.front().options().dtype(at::kFloat));
  const at::Tensor worst = at::stack(max_abs).amax();
  return at::logical_not(at::isfinite(worst)).to(at::kFloat).reshape({1});
}

}  // namespace stratum::optim
