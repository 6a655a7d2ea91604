#include "stratum/pipeline/schedule.h"

#include <algorithm>

#include "stratum/core/error.h"

namespace stratum::pipeline {
namespace {

struct Compute {
  Op op;  // forward, backward, backward_input or backward_weight
  int micro, chunk;
};

// The compute order of one rank, before transfers are added.
std::vector<Compute> gpipe_order(int m) {
  std::vector<Compute> out;
  for (int i = 0; i < m; ++i) out.push_back({Op::forward, i, 0});
  for (int i = 0; i < m; ++i) out.push_back({Op::backward, i, 0});
  return out;
}

std::vector<Compute> one_f_one_b_order(int p, int m, int rank) {
  const int warmup = std::min(p - rank - 1, m);
  std::vector<Compute> out;
  for (int i = 0; i < warmup; ++i) out.push_back({Op::forward, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({Op::forward, warmup + i, 0});
    out.push_back({Op::backward, i, 0});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({Op::backward, i, 0});
  return out;
}

// ZB-H1 (the paper's Figure 3): 1F1B with the backward split, rank r's W's
// running r behind its B's. In 1F1B the backward chain of the last
// micro-batches towards rank 0 is the critical path; with its W's deferred a
// rank runs its next B sooner, and the r W's it owes fill the cool-down, where
// it would otherwise wait for the next gradient. A deferred W keeps its
// micro-batch's inputs, so rank r holds up to (p - r - 1) + (r + 1) = p, rank
// 0's 1F1B peak; rank 0 itself defers none (nothing downstream waits on it).
std::vector<Compute> zb_h1_order(int p, int m, int rank) {
  const int warmup = std::min(p - rank - 1, m);
  const int lag = rank;
  std::vector<Compute> out;
  int weights = 0;  // W's placed so far, in micro-batch order
  auto weights_up_to = [&](int count) {
    for (; weights < count; ++weights) out.push_back({Op::backward_weight, weights, 0});
  };
  for (int i = 0; i < warmup; ++i) out.push_back({Op::forward, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({Op::forward, warmup + i, 0});
    out.push_back({Op::backward_input, i, 0});
    weights_up_to(i + 1 - lag);
  }
  for (int i = m - warmup; i < m; ++i) {
    out.push_back({Op::backward_input, i, 0});
    weights_up_to(i + 1 - lag);
  }
  weights_up_to(m);
  return out;
}

// Megatron's interleaved order: the k-th forward (and backward) of a rank is
// micro-batch (k / pv)·p + k % p on chunk (k % pv) / p (backward: reversed).
std::vector<Compute> interleaved_order(int p, int m, int v, int rank) {
  const int total = m * v;
  auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto chunk = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  const int warmup = m == p ? total : std::min(total, 2 * (p - rank - 1) + (v - 1) * p);
  std::vector<Compute> out;
  for (int k = 0; k < warmup; ++k) out.push_back({Op::forward, micro(k), chunk(k, true)});
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back({Op::forward, micro(warmup + i), chunk(warmup + i, true)});
    out.push_back({Op::backward, micro(i), chunk(i, false)});
  }
  for (int k = total - warmup; k < total; ++k) out.push_back({Op::backward, micro(k), chunk(k, false)});
  return out;
}

// Forwards only: micro-batches in groups of p through chunk 0..v-1.
std::vector<Compute> forward_order(int p, int m, int v) {
  std::vector<Compute> out;
  for (int group = 0; group < m; group += p)
    for (int c = 0; c < v; ++c)
      for (int i = group; i < std::min(m, group + p); ++i) out.push_back({Op::forward, i, c});
  return out;
}

// Each compute with the transfers around it (a W's input gradient has already
// gone with its B), then the step's end.
std::vector<Action> lower(const Schedule& s, int rank, const std::vector<Compute>& order) {
  std::vector<Action> out;
  const int last = s.num_virtual_stages() - 1;
  for (const Compute& c : order) {
    const int vs = s.virtual_stage(rank, c.chunk);
    if (c.op == Op::forward) {
      if (vs > 0) out.push_back({Op::recv_act, c.micro, c.chunk, s.rank_of(vs - 1)});
      out.push_back({Op::forward, c.micro, c.chunk, -1});
      if (vs < last) out.push_back({Op::send_act, c.micro, c.chunk, s.rank_of(vs + 1)});
    } else if (c.op == Op::backward_weight) {
      out.push_back({Op::backward_weight, c.micro, c.chunk, -1});
    } else {
      if (vs < last) out.push_back({Op::recv_grad, c.micro, c.chunk, s.rank_of(vs + 1)});
      out.push_back({c.op, c.micro, c.chunk, -1});
      if (vs > 0) out.push_back({Op::send_grad, c.micro, c.chunk, s.rank_of(vs - 1)});
    }
  }
  if (s.forward_only) return out;
  // The first and last stages hold the tied embedding (input and output).
  if (s.stages > 1 && (rank == 0 || rank == s.stages - 1)) out.push_back({Op::reduce_tied, -1, 0, -1});
  out.push_back({Op::optimizer_step, -1, 0, -1});
  return out;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::forward: return "F";
    case Op::backward: return "B";
    case Op::backward_input: return "B";
    case Op::backward_weight: return "W";
    case Op::send_act: return "send_act";
    case Op::recv_act: return "recv_act";
    case Op::send_grad: return "send_grad";
    case Op::recv_grad: return "recv_grad";
    case Op::reduce_tied: return "reduce_tied";
    case Op::optimizer_step: return "step";
  }
  return "?";
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}

std::string to_string(const Action& a) {
  if (a.op == Op::reduce_tied || a.op == Op::optimizer_step) return op_name(a.op);
  std::string s = op_name(a.op) + std::string(is_compute(a.op) ? "" : " ") + std::to_string(a.micro);
  if (a.chunk > 0) s += "." + std::to_string(a.chunk);
  if (!is_compute(a.op)) s += (a.op == Op::send_act || a.op == Op::send_grad ? " -> " : " <- ") + std::to_string(a.peer);
  return s;
}

Schedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  const std::string what = std::string("pipeline schedule '") + config::pipeline_schedule_name(kind) + "'";
  if (stages < 1 || micro_batches < 1 || virtual_stages < 1)
    throw Error(what + ": stages (" + std::to_string(stages) + "), micro-batches (" + std::to_string(micro_batches) +
                ") and virtual stages (" + std::to_string(virtual_stages) + ") must each be at least 1");
  // Every rank's list is built (and simulated) here: bound the whole before allocating it.
  constexpr int64_t kMaxComputes = int64_t{1} << 24;
  const int64_t computes = int64_t{stages} * micro_batches * virtual_stages;
  if (computes > kMaxComputes)
    throw Error(what + ": " + std::to_string(stages) + " stages x " + std::to_string(micro_batches) +
                " micro-batches x " + std::to_string(virtual_stages) + " virtual stages is " + std::to_string(computes) +
                " forward passes a step, over the " + std::to_string(kMaxComputes) +
                " a schedule may hold; use fewer micro-batches (gradient_accumulation_steps) or stages");
  if (kind != ScheduleKind::interleaved && virtual_stages != 1)
    throw Error(what + ": " + std::to_string(virtual_stages) +
                " virtual stages, but only the interleaved schedule runs more than one chunk per rank");
  if (kind == ScheduleKind::interleaved) {
    if (virtual_stages < 2 || stages < 2)
      throw Error(what + ": needs at least 2 stages and 2 virtual stages, got " + std::to_string(stages) + " and " +
                  std::to_string(virtual_stages));
    if (micro_batches % stages != 0)
      throw Error(what + ": " + std::to_string(micro_batches) + " micro-batches (gradient_accumulation_steps) is not a "
                  "multiple of the " + std::to_string(stages) + " stages, which its order needs");
  }
  Schedule s;
  s.kind = kind;
  s.stages = stages;
  s.micro_batches = micro_batches;
  s.virtual_stages = virtual_stages;
  for (int r = 0; r < stages; ++r) {
    std::vector<Compute> order;
    switch (kind) {
      case ScheduleKind::gpipe: order = gpipe_order(micro_batches); break;
      case ScheduleKind::one_f_one_b: order = one_f_one_b_order(stages, micro_batches, r); break;
      case ScheduleKind::interleaved: order = interleaved_order(stages, micro_batches, virtual_stages, r); break;
      case ScheduleKind::zb_h1: order = zb_h1_order(stages, micro_batches, r); break;
    }
    s.ranks.push_back(lower(s, r, order));
  }
  return s;
}

Schedule make_forward_schedule(int stages, int micro_batches, int virtual_stages) {
  if (stages < 1 || micro_batches < 1 || virtual_stages < 1)
    throw Error("forward schedule: stages (" + std::to_string(stages) + "), micro-batches (" +
                std::to_string(micro_batches) + ") and virtual stages (" + std::to_string(virtual_stages) +
                ") must each be at least 1");
  constexpr int64_t kMaxComputes = int64_t{1} << 24;
  if (int64_t{stages} * micro_batches * virtual_stages > kMaxComputes)
    throw Error("forward schedule: " + std::to_string(stages) + " stages x " + std::to_string(micro_batches) +
                " micro-batches x " + std::to_string(virtual_stages) + " virtual stages is over the " +
                std::to_string(kMaxComputes) + " forward passes a schedule may hold");
  Schedule s;
  s.kind = virtual_stages > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
  s.stages = stages;
  s.micro_batches = micro_batches;
  s.virtual_stages = virtual_stages;
  s.forward_only = true;
  const std::vector<Compute> order = forward_order(stages, micro_batches, virtual_stages);
  for (int r = 0; r < stages; ++r) s.ranks.push_back(lower(s, r, order));
  return s;
}

}  // namespace stratum::pipeline
