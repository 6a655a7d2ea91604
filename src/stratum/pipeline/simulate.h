#pragma once
// Runs a Schedule (schedule.h) without ranks: every rank executes its actions
// in order, a compute takes its cost, a send is asynchronous (the message is
// ready when the compute before it ends), a receive waits for the matching
// send. Checks what a real run relies on and throws stratum::Error naming the
// rank and action when one fails:
//   - every receive gets the message it expects, in order (a transfer pairs by
//     order on a real link), and no message is left unreceived;
//   - no deadlock (some rank can always go on until all are done);
//   - every (micro-batch, chunk) is run forward and then backward, once each,
//     on the rank that holds the chunk.
#include <vector>

#include "stratum/pipeline/schedule.h"

namespace stratum::pipeline {

// Per chunk (a virtual stage's share of the model); transfers cost nothing.
struct Costs {
  double forward = 1.0;
  double backward = 2.0;
};

struct Simulation {
  double makespan = 0;                  // the step's time
  std::vector<double> busy;             // by rank: compute time
  std::vector<int> peak_activations;    // by rank: most micro-batch chunks between forward and backward
  // Per rank, each compute's start and end, in execution order (for the table).
  struct Slot {
    Action action;
    double start, end;
  };
  std::vector<std::vector<Slot>> timeline;
  // (makespan - ideal) / ideal, ideal = a rank's compute time m·v·(F + B):
  // (p - 1)/m for GPipe and 1F1B, (p - 1)/(v·m) interleaved, at any costs.
  double bubble() const;
};

Simulation simulate(const Schedule& schedule, const Costs& costs = Costs());

// The papers' figure: one row per rank, one column per time unit of `unit`,
// each compute's label ("F3", "B3", "F3.1" for chunk 1) in the columns it runs,
// "." where the rank waits.
std::string schedule_table(const Schedule& schedule, const Simulation& sim, double unit = 1.0);

}  // namespace stratum::pipeline
