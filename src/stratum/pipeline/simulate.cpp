#include "stratum/pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
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

// Where a (rank, chunk, micro-batch) is in its forward and backward.
enum class Progress { none, forward, input, weight, backward };

std::string name(const Schedule& s) {
  return std::string("pipeline schedule '") + config::pipeline_schedule_name(s.kind) + "'";
}

double cost_of(Op op, const Costs& c) {
  switch (op) {
    case Op::forward: return c.forward;
    case Op::backward: return c.backward();
    case Op::backward_input: return c.backward_input;
    case Op::backward_weight: return c.backward_weight;
    default: return 0.0;
  }
}

// The next state of a compute, or the reason it may not run now.
Progress advance(Op op, Progress st, std::string& error) {
  const bool split = st == Progress::input || st == Progress::weight;
  switch (op) {
    case Op::forward:
      if (st != Progress::none) error = "forward run twice";
      return Progress::forward;
    case Op::backward:
      if (st == Progress::none) error = "backward before its forward";
      else if (split) error = "full backward of a micro-batch whose backward is split into input and weight";
      else if (st == Progress::backward) error = "backward run twice";
      return Progress::backward;
    case Op::backward_input:
      if (st == Progress::none) error = "backward_input before its forward";
      else if (st == Progress::backward) error = "backward_input of a micro-batch that ran the full backward";
      else if (split) error = "backward_input run twice";
      return Progress::input;
    default:  // backward_weight
      if (st == Progress::none || st == Progress::forward) error = "backward_weight before its backward_input";
      else if (st == Progress::backward) error = "backward_weight of a micro-batch that ran the full backward";
      else if (st == Progress::weight) error = "backward_weight run twice";
      return Progress::weight;
  }
}

}  // namespace

double Simulation::bubble() const {
  const double ideal = busy.empty() ? 0.0 : *std::max_element(busy.begin(), busy.end());
  return ideal > 0 ? (makespan - ideal) / ideal : 0.0;
}

Simulation simulate(const Schedule& s, const Costs& costs) {
  return simulate(s, std::vector<Costs>(std::max(s.stages, 0), costs));
}

Simulation simulate(const Schedule& s, const std::vector<Costs>& per_rank) {
  const int p = s.stages;
  if (static_cast<int>(s.ranks.size()) != p)
    throw Error("pipeline schedule: " + std::to_string(s.ranks.size()) + " action lists for " + std::to_string(p) +
                " stages");
  if (static_cast<int>(per_rank.size()) != p)
    throw Error(name(s) + ": costs for " + std::to_string(per_rank.size()) + " ranks, but it has " +
                std::to_string(p) + " stages");
  const int last = s.num_virtual_stages() - 1;
  Simulation sim;
  sim.busy.assign(p, 0.0);
  sim.peak_activations.assign(p, 0);
  sim.timeline.resize(p);
  std::vector<double> clock(p, 0.0);
  std::vector<size_t> pc(p, 0);
  std::vector<int> live(p, 0);
  std::vector<bool> stepped(p, false);
  // (from, to, is_grad) -> messages in send order.
  std::map<std::tuple<int, int, bool>, std::deque<Message>> links;
  std::map<std::tuple<int, int, int>, Progress> state;  // (rank, chunk, micro)

  // A forward-only schedule's micro-batches are done once forward.
  auto finished = [&](Progress st) {
    return st == Progress::weight || st == Progress::backward || (s.forward_only && st == Progress::forward);
  };
  // The step's closing actions need every gradient of the rank.
  auto require_all_computes = [&](int r) {
    for (int c = 0; c < s.virtual_stages; ++c)
      for (int i = 0; i < s.micro_batches; ++i)
        if (!finished(state[{r, c, i}]))
          throw Error(where(s, r, pc[r]) + ": before the backward of micro-batch " + std::to_string(i) +
                      " on chunk " + std::to_string(c) + " is done");
  };
  auto at_reduce_tied = [&](int r) { return pc[r] < s.ranks[r].size() && s.ranks[r][pc[r]].op == Op::reduce_tied; };

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (pc[r] < s.ranks[r].size()) {
        const Action& a = s.ranks[r][pc[r]];
        if (stepped[r]) throw Error(where(s, r, pc[r]) + ": after optimizer_step, which ends the step");
        if (s.forward_only && (a.op == Op::reduce_tied || a.op == Op::optimizer_step))
          throw Error(where(s, r, pc[r]) + ": a step's end in a forward-only schedule");
        if (a.op == Op::reduce_tied) {
          if (p == 1) throw Error(where(s, r, pc[r]) + ": one stage holds both ends of the tied embedding");
          if (r != 0 && r != p - 1)
            throw Error(where(s, r, pc[r]) + ": only ranks 0 and " + std::to_string(p - 1) +
                        " hold the tied embedding");
          require_all_computes(r);
          // An all-reduce of the two: both go on when the later one arrives.
          const int partner = r == 0 ? p - 1 : 0;
          if (!at_reduce_tied(partner)) break;
          require_all_computes(partner);
          clock[r] = clock[partner] = std::max(clock[r], clock[partner]);
          ++pc[partner];
        } else if (a.op == Op::optimizer_step) {
          require_all_computes(r);
          stepped[r] = true;
        } else {
          if (a.chunk < 0 || a.chunk >= s.virtual_stages || a.micro < 0 || a.micro >= s.micro_batches)
            throw Error(where(s, r, pc[r]) + ": micro-batch or chunk out of range");
          const int vs = s.virtual_stage(r, a.chunk);
          if (a.op == Op::recv_act || a.op == Op::recv_grad) {
            const bool grad = a.op == Op::recv_grad;
            const int from = s.rank_of(grad ? vs + 1 : vs - 1);
            if ((grad && vs == last) || (!grad && vs == 0) || a.peer != from)
              throw Error(where(s, r, pc[r]) + ": virtual stage " + std::to_string(vs) +
                          " receives nothing from rank " + std::to_string(a.peer));
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
            std::string error;
            Progress& st = state[{r, a.chunk, a.micro}];
            if (s.forward_only && a.op != Op::forward)
              throw Error(where(s, r, pc[r]) + ": a backward in a forward-only schedule");
            if (s.forward_only && st != Progress::none)
              throw Error(where(s, r, pc[r]) + ": forward run twice");
            st = advance(a.op, st, error);
            if (!error.empty()) throw Error(where(s, r, pc[r]) + ": " + error);
            if (a.op == Op::forward) sim.peak_activations[r] = std::max(sim.peak_activations[r], ++live[r]);
            if (finished(st)) --live[r];
            const double cost = cost_of(a.op, per_rank[r]);
            sim.timeline[r].push_back({a, clock[r], clock[r] + cost});
            clock[r] += cost;
            sim.busy[r] += cost;
          }
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
      throw Error(name(s) + ": rank " + std::to_string(std::get<0>(link)) + " sent " + std::to_string(q.size()) +
                  " message(s) to rank " + std::to_string(std::get<1>(link)) + " that nothing receives");
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < s.virtual_stages; ++c)
      for (int i = 0; i < s.micro_batches; ++i) {
        const Progress st = state[{r, c, i}];
        if (!finished(st))
          throw Error(name(s) + ": rank " + std::to_string(r) + " never runs the " +
                      (st == Progress::none ? "forward" : st == Progress::input ? "backward_weight" : "backward") +
                      " of micro-batch " + std::to_string(i) + " on chunk " + std::to_string(c));
      }
    if (!stepped[r] && !s.forward_only)
      throw Error(name(s) + ": rank " + std::to_string(r) + " never runs optimizer_step");
  }
  sim.makespan = p > 0 ? *std::max_element(clock.begin(), clock.end()) : 0.0;
  for (int r = 0; r < p; ++r) sim.idle.push_back(sim.makespan - sim.busy[r]);
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
