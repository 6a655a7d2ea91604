#pragma once
// Stragglers: a rank whose own work in a step (its step time less the time it
// spent blocked waiting for collectives, recording_communicator.h) stays above
// the median of its peers' by more than `threshold` for `consecutive` steps in
// a row is named once, and named again when it has kept within it as long. The others wait for such a
// rank in every collective, so the whole job runs at its pace. Peers are the
// ranks of one cohort (stratum-train: one pipeline stage; stages do different
// work). Pure and torch-free; stratum-train gathers the figures with the
// memory figures it gathers every step anyway.
#include <cstdint>
#include <string>
#include <vector>

namespace stratum::monitor {

struct StragglerOptions {
  double threshold = 0.25;            // above the median by more than this fraction
  int consecutive = 5;                // for this many steps in a row
  double min_excess_seconds = 0.01;   // and by at least this much (tiny steps are noisy)
};

class StragglerCheck {
 public:
  explicit StragglerCheck(StragglerOptions options = {});
  // One step's figures: busy[r] is rank r's seconds of own work, cohort[r] its
  // group of peers (empty: all ranks one cohort); a rank is compared with the
  // median of the others of its cohort. Returns the lines to log: ranks
  // flagged at this step, ranks that recovered.
  std::vector<std::string> update(int64_t step, const std::vector<double>& busy, const std::vector<int>& cohort = {});
  // Ranks flagged now.
  std::vector<int> flagged() const;

 private:
  StragglerOptions options_;
  std::vector<int> streak_;         // steps in a row above the limit, by rank
  std::vector<int> calm_;           // steps in a row within it
  std::vector<bool> flagged_;
};

}  // namespace stratum::monitor
