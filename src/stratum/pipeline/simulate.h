#pragma once
// Runs a Schedule (schedule.h) without ranks: every rank executes its actions
// in order, a compute takes its cost, a send is asynchronous (the message is
// ready when the compute before it ends), a receive waits for the matching
// send, reduce_tied waits for its partner rank, and reduce_tied and
// optimizer_step cost nothing. Checks what a real run relies on and throws
// stratum::Error naming the rank and action when one fails:
//   - every receive gets the message it expects, in order (a transfer pairs by
//     order on a real link), and no message is left unreceived;
//   - no deadlock (some rank can always go on until all are done);
//   - every (micro-batch, chunk) is run forward and then backward, once each,
//     on the rank that holds the chunk: either one full backward, or a
//     backward_input and after it a backward_weight, never both kinds;
//   - reduce_tied only on ranks 0 and p - 1 (p > 1), optimizer_step once on
//     every rank, last, and both after all of the rank's computes;
//   - a forward-only schedule (make_forward_schedule) runs each forward once
//     and nothing else.
#include <vector>

#include "stratum/pipeline/schedule.h"

namespace stratum::pipeline {

// Per chunk (a virtual stage's share of the model), in any unit (measured
// seconds work as well as the papers' units); transfers cost nothing. A full
// backward costs backward_input + backward_weight.
struct Costs {
  double forward = 1.0;
  double backward_input = 1.0;   // B: the input gradient
  double backward_weight = 1.0;  // W: the weight gradients
  double backward() const { return backward_input + backward_weight; }
};

struct Simulation {
  double makespan = 0;                  // the step's time
  std::vector<double> busy;             // by rank: compute time
  std::vector<double> idle;             // by rank: makespan - busy (waiting, before, between or after its computes)
  // By rank: most micro-batch chunks between forward and the end of their
  // backward (the W for a split one: it still needs the saved inputs).
  std::vector<int> peak_activations;
  // Per rank, each compute's start and end, in execution order (for the table).
  struct Slot {
    Action action;
    double start, end;
  };
  std::vector<std::vector<Slot>> timeline;
  // (makespan - ideal) / ideal, ideal = the busiest rank's compute time, which
  // at the same costs on every rank is m·v·(F + B + W): (p - 1)/m for GPipe and
  // 1F1B, (p - 1)/(v·m) interleaved, at any costs; ZB-H1 see schedule.h.
  double bubble() const;
};

Simulation simulate(const Schedule& schedule, const Costs& costs = Costs());
// With each rank's own costs (per_rank[r] for rank r, e.g. measured on
// unevenly split stages); per_rank must have one entry per stage.
Simulation simulate(const Schedule& schedule, const std::vector<Costs>& per_rank);

// The papers' figure: one row per rank, one column per time unit of `unit`,
// each compute's label ("F3", "B3", "W3", "F3.1" for chunk 1) in the columns it
// runs, "." where the rank waits.
std::string schedule_table(const Schedule& schedule, const Simulation& sim, double unit = 1.0);

}  // namespace stratum::pipeline
