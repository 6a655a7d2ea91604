#include "stratum/pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "stratum/core/error.h"

namespace stratum::pipeline {
namespace {

struct Message {
  int micro, target_vs;  // the (micro-batch, virtual stage) that must receive it
  double ready;
};

std::string where(const Schedule& s, int rank, size_t index) {
  return std::string("pipeline schedule '") + config::pipeline_schedule_name(s.kind) + "' (p=" + std::to_string(s.stages) +
         ", m=" + std::to_string(s.micro_batches) + ", v=" + std::to_string(s.virtual_stages) + "): rank " +
         std::to_string(rank) + ", action " + std::to_string(index) + " (" + to_string(s.ranks[rank][index]) + ")";
}

}  // namespace

double Simulation::bubble() const {
  const double ideal = busy.empty() ? 0.0 : *std::max_element(busy.begin(), busy.end());
  return ideal > 0 ? (makespan - ideal) / ideal : 0.0;
}

Simulation simulate(const Schedule& s, const Costs& costs) {
  const int p = s.stages;
  if (static_cast<int>(s.ranks.size()) != p)
    throw Error("pipeline schedule: " + std::to_string(s.ranks.size()) + " action lists for " + std::to_string(p) +
                " stages");
  const int last = s.num_virtual_stages() - 1;
  Simulation sim;
  sim.busy.assign(p, 0.0);
  sim.peak_activations.assign(p, 0);
  sim.timeline.resize(p);
  std::vector<double> clock(p, 0.0);
  std::vector<size_t> pc(p, 0);
  std::vector<int> live(p, 0);
  // (from, to, is_grad) -> messages in send order.
  std::map<std::tuple<int, int, bool>, std::deque<Message>> links;
  // (rank, chunk, micro) -> 0 none, 1 forward done, 2 backward done
  std::map<std::tuple<int, int, int>, int> state;

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (pc[r] < s.ranks[r].size()) {
        const Action& a = s.ranks[r][pc[r]];
        if (a.chunk < 0 || a.chunk >= s.virtual_stages || a.micro < 0 || a.micro >= s.micro_batches)
          throw Error(where(s, r, pc[r]) + ": micro-batch or chunk out of range");
        const int vs = s.virtual_stage(r, a.chunk);
        if (a.op == Op::recv_act || a.op == Op::recv_grad) {
          const bool grad = a.op == Op::recv_grad;
          const int from = s.rank_of(grad ? vs + 1 : vs - 1);
          if ((grad && vs == last) || (!grad && vs == 0) || a.peer != from)
            throw Error(where(s, r, pc[r]) + ": virtual stage " + std::to_string(vs) + " receives nothing from rank " +
                        std::to_string(a.peer));
          auto& q = links[{from, r, grad}];
          if (q.empty()) break;  // waits for the send
          const Message msg = q.front();
          if (msg.micro != a.micro || msg.target_vs != vs)
            throw Error(where(s, r, pc[r]) + ": the next message from rank " + std::to_string(from) +
                        " is micro-batch " + std::to_string(msg.micro) + " for virtual stage " +
                        std::to_string(msg.target_vs) + " (transfers pair in order)");
          q.pop_front();
          clock[r] = std::max(clock[r], msg.ready);
        } else if (a.op == Op::send_act || a.op == Op::send_grad) {
          const bool grad = a.op == Op::send_grad;
          const int target = grad ? vs - 1 : vs + 1;
          if (target < 0 || target > last || a.peer != s.rank_of(target))
            throw Error(where(s, r, pc[r]) + ": virtual stage " + std::to_string(vs) + " sends nothing to rank " +
                        std::to_string(a.peer));
          links[{r, a.peer, grad}].push_back({a.micro, target, clock[r]});
        } else {
          int& st = state[{r, a.chunk, a.micro}];
          if (a.op == Op::forward && st != 0)
            throw Error(where(s, r, pc[r]) + ": forward run twice");
          if (a.op == Op::backward && st != 1)
            throw Error(where(s, r, pc[r]) + (st == 0 ? ": backward before its forward" : ": backward run twice"));
          st = a.op == Op::forward ? 1 : 2;
          live[r] += a.op == Op::forward ? 1 : -1;
          sim.peak_activations[r] = std::max(sim.peak_activations[r], live[r]);
          const double cost = a.op == Op::forward ? costs.forward : costs.backward;
          sim.timeline[r].push_back({a, clock[r], clock[r] + cost});
          clock[r] += cost;
          sim.busy[r] += cost;
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (pc[r] < s.ranks[r].size()) {
      std::string blocked;
      for (int q = 0; q < p; ++q)
        if (pc[q] < s.ranks[q].size()) blocked += "\n  " + where(s, q, pc[q]) + " waits";
      throw Error("pipeline schedule deadlocks:" + blocked);
    }
  for (const auto& [link, q] : links)
    if (!q.empty())
      throw Error(std::string("pipeline schedule '") + config::pipeline_schedule_name(s.kind) + "': rank " +
                  std::to_string(std::get<0>(link)) + " sent " + std::to_string(q.size()) + " message(s) to rank " +
                  std::to_string(std::get<1>(link)) + " that nothing receives");
  for (int r = 0; r < p; ++r)
    for (int c = 0; c < s.virtual_stages; ++c)
      for (int i = 0; i < s.micro_batches; ++i)
        if (state[{r, c, i}] != 2)
          throw Error(std::string("pipeline schedule '") + config::pipeline_schedule_name(s.kind) + "': rank " + std::to_string(r) +
                      " never runs the " + (state[{r, c, i}] == 0 ? "forward" : "backward") + " of micro-batch " +
                      std::to_string(i) + " on chunk " + std::to_string(c));
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  return sim;
}

std::string schedule_table(const Schedule& s, const Simulation& sim, double unit) {
  const int columns = static_cast<int>(std::ceil(sim.makespan / unit - 1e-9));
  size_t width = 2;
  for (const auto& row : sim.timeline)
    for (const auto& slot : row) width = std::max(width, to_string(slot.action).size());
  std::string out;
  for (int r = 0; r < s.stages; ++r) {
    std::vector<std::string> cells(columns, ".");
    for (const auto& slot : sim.timeline[r]) {
      const int begin = static_cast<int>(std::floor(slot.start / unit + 1e-9));
      const int end = std::min(columns, static_cast<int>(std::ceil(slot.end / unit - 1e-9)));
      for (int c = begin; c < end; ++c) cells[c] = to_string(slot.action);
    }
    out += "rank " + std::to_string(r) + " |";
    for (const auto& cell : cells) out += " " + cell + std::string(width - cell.size(), ' ');
    out += "\n";
  }
  return out;
}

}  // namespace stratum::pipeline
