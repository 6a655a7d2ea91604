#pragma once
// Pipeline schedules as data: for every pipeline rank, the list of actions it
// runs in one training step (forward and backward of a micro-batch on one of
// its model chunks, the transfers they need, and the step's closing gradient
// reduction and optimizer step), generated per schedule kind and checked by
// the simulator (simulate.h) without any rank. Pure code: no tensors, no
// communicator.
//
// Stages: p ranks, each holding v model chunks (virtual stages; v = 1 except
// for the interleaved schedule). Chunk c of rank r is virtual stage c·p + r, so
// activations flow rank 0 -> p-1 through chunk 0, then again through chunk 1,...
#include <cstdint>
#include <string>
#include <vector>

#include "stratum/config/sections.h"

namespace stratum::pipeline {

// The config's pipeline.schedule ("gpipe", "1f1b", "interleaved", "zb-h1").
using ScheduleKind = config::PipelineSchedule;

enum class Op {
  forward,    // F: the chunk's forward of micro-batch `micro`
  backward,   // B: its backward (input and weight gradients)
  // ZB-H1 splits the backward in two: the input gradient (sent on at once)
  // and, later, the weight gradients it deferred.
  backward_input,   // "B": the input gradient
  backward_weight,  // "W": the deferred weight gradients of that micro-batch
  send_act,   // the forward's output to the next virtual stage
  recv_act,   // the previous virtual stage's output, before the forward
  send_grad,  // the backward's input gradient to the previous virtual stage
  recv_grad,  // the next virtual stage's input gradient, before the backward
  // The step's end, after every compute of the rank; no micro-batch (micro -1).
  reduce_tied,     // all-reduce of the tied embedding's gradient over ranks 0 and p - 1 (p > 1 only)
  optimizer_step,  // "step": the optimizer updates this rank's parameters
};
const char* op_name(Op op);
bool is_compute(Op op);

struct Action {
  Op op;
  int micro = 0;  // micro-batch, 0-based; -1 for reduce_tied and optimizer_step
  int chunk = 0;  // model chunk on this rank, 0-based
  int peer = -1;  // transfers: the other rank
  bool operator==(const Action& o) const { return op == o.op && micro == o.micro && chunk == o.chunk && peer == o.peer; }
};
// "F3", "B0.1" (micro 0, chunk 1), "W3", "send_act 3 -> 2", "step".
std::string to_string(const Action& a);

struct Schedule {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int stages = 1;          // p: pipeline ranks
  int micro_batches = 1;   // m: per step
  int virtual_stages = 1;  // v: model chunks per rank
  // Forwards alone (evaluation, generation): no backward, no reduce_tied, no optimizer_step.
  bool forward_only = false;
  std::vector<std::vector<Action>> ranks;  // by pipeline rank, in execution order

  int virtual_stage(int rank, int chunk) const { return chunk * stages + rank; }
  int rank_of(int virtual_stage) const { return virtual_stage % stages; }
  int num_virtual_stages() const { return stages * virtual_stages; }
};

// The actions of every rank, transfers included (a receive right before the
// compute that needs it, a send right after the compute that produced it; a
// backward_weight has none), then reduce_tied on ranks 0 and p - 1 when p > 1,
// then optimizer_step on every rank.
// Throws stratum::Error naming the problem: p, m or v below 1; v > 1 outside
// the interleaved schedule; interleaved with v < 2 or m not a multiple of p
// (Megatron's condition for its order).
//   gpipe:       every forward, then every backward (micro-batch order);
//   one_f_one_b: rank r runs min(p - r - 1, m) forwards, then alternates one
//                forward and one backward, then the remaining backwards
//                (PipeDream-flush); r holds at most p - r activations;
//   interleaved: Megatron's interleaved 1F1B over v chunks: micro-batches in
//                groups of p, each group through chunk 0..v-1 forward and
//                v-1..0 backward; warm-up 2(p - r - 1) + (v - 1)p forwards;
//   zb_h1:       1F1B's order with the backward split into backward_input (B)
//                and backward_weight (W), rank r's W's running r behind its
//                B's (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024,
//                ZB-H1). At F = B = W the bubble is (p - 1)/(3m) for m >= p, a
//                third of 1F1B's, and (2p - m - 1)/(3m) for m < p. Every rank
//                holds at most min(p, m) micro-batches between F and W: 1F1B's
//                peak on rank 0, the paper's bound (the most over all ranks).
Schedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1);

// Forwards alone, for evaluation and generation: micro-batches in groups of p,
// each group through chunk 0..v-1 (v = 1: every micro-batch in order), each
// forward between its receive and its send. Every dependency points to an
// earlier item of every rank's order, so it never deadlocks, and at v = 1
// rank r runs micro-batch i while rank r + 1 runs i - 1. Any m >= 1 (the
// training schedules' multiple-of-p rule does not apply).
Schedule make_forward_schedule(int stages, int micro_batches, int virtual_stages = 1);

}  // namespace stratum::pipeline
