#include "stratum/monitor/straggler.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace stratum::monitor {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

StragglerCheck::StragglerCheck(StragglerOptions options) : options_(options) {}

std::vector<std::string> StragglerCheck::update(int64_t step, const std::vector<double>& busy,
                                                const std::vector<int>& cohort) {
  const size_t n = busy.size();
  streak_.resize(n, 0);
  calm_.resize(n, 0);
  flagged_.resize(n, false);
  auto cohort_of = [&](size_t r) { return r < cohort.size() ? cohort[r] : 0; };
  std::vector<std::string> lines;
  for (size_t r = 0; r < n; ++r) {
    // Against the others of its cohort (with two ranks a median that held
    // the rank itself would halve its excess).
    std::vector<double> others;
    for (size_t q = 0; q < n; ++q)
      if (q != r && cohort_of(q) == cohort_of(r)) others.push_back(busy[q]);
    if (others.empty()) continue;  // nobody to compare with
    const double m = median(others);
    const bool slow = busy[r] > m * (1 + options_.threshold) && busy[r] - m >= options_.min_excess_seconds;
    streak_[r] = slow ? streak_[r] + 1 : 0;
    calm_[r] = slow ? 0 : calm_[r] + 1;
    char text[512];
    if (!flagged_[r] && streak_[r] >= options_.consecutive) {
      flagged_[r] = true;
      std::snprintf(text, sizeof text,
                    "straggler: rank %zu's own work in a step (its step time less its waits for collectives) was "
                    "more than %.0f%% above the median of the other %zu rank%s of its stage for %d steps in a row "
                    "(steps %lld-%lld); at step %lld %.3f s against %.3f s (+%.0f%%): the others wait for it",
                    r, options_.threshold * 100, others.size(), others.size() == 1 ? "" : "s", streak_[r],
                    static_cast<long long>(step - streak_[r] + 1), static_cast<long long>(step),
                    static_cast<long long>(step), busy[r], m, m > 0 ? (busy[r] / m - 1) * 100 : 0.0);
      lines.push_back(text);
    } else if (flagged_[r] && calm_[r] >= options_.consecutive) {
      flagged_[r] = false;
      std::snprintf(text, sizeof text,
                    "straggler: rank %zu keeps pace again (%d steps in a row within %.0f%% of the others' median; at "
                    "step %lld %.3f s against %.3f s)",
                    r, calm_[r], options_.threshold * 100, static_cast<long long>(step), busy[r], m);
      lines.push_back(text);
    }
  }
  return lines;
}

std::vector<int> StragglerCheck::flagged() const {
  std::vector<int> out;
  for (size_t r = 0; r < flagged_.size(); ++r)
    if (flagged_[r]) out.push_back(static_cast<int>(r));
  return out;
}

}  // namespace stratum::monitor
