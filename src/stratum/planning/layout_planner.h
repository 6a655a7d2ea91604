#pragma once
// The layout planner behind `stratum-estimate --plan`: every layout (dp, pp,
// tp, sequence parallelism, expert and context parallelism, ZeRO stage,
// offload, micro-batch, schedule, activation checkpointing) a cluster can
// train a model at, each with its
// per-GPU memory at its busiest pipeline stage (memory_estimator.h's model
// states and activations, plus buffers) and a step time from the model below;
// the layouts that fit, fastest first. Pure code.
//
// The step-time model; every rate is an input (Hardware):
//  - compute: 6 FLOPs a parameter and token plus 12·L·h·s a token (what
//    stratum-train's MFU counts; a tied head's matrix counted at the head),
//    blocks at 4/3 of that under activation checkpointing (the recomputed
//    forward), at `mfu` of the GPU's peak; forward a third, the input and the
//    weight gradients a third each; each pipeline stage its own layers' share.
//  - tensor parallelism, per block and micro-batch: two all-reduces of the
//    activations (b·s·h) forward and two backward, two more in a recomputed
//    forward; under sequence parallelism all-gathers and reduce-scatters of the
//    same volume, and 1.5x it backward (Stratum gathers a region's input again
//    there); the embedding's and the head's one each. Over the node's link
//    (a tensor-parallel group stays in its node), not overlapped.
//  - pipeline: the schedule simulated (pipeline::simulate) with each stage's
//    forward and backward costs, its tensor-parallel collectives and the
//    receive of its input (b·s·h, a 1/t slice under sequence parallelism) over
//    the link between the stages included; the makespan includes the bubble.
//  - data parallelism: ZeRO-0 all-reduces the gradients at the last
//    micro-batch, ZeRO-1 reduce-scatters them there, ZeRO-2 every micro-batch,
//    ZeRO-3 all-gathers the parameters forward and backward and reduce-
//    scatters the gradients every micro-batch; ring volumes over the slowest
//    link the group spans. They overlap the backward they follow (ZeRO-3: the
//    forward and backward) and what exceeds it shows; the parameters'
//    all-gather after the step (ZeRO-1/2) shows whole.
//  - expert parallelism (a mixture of experts, cut from data parallelism):
//    the experts' share of the parameters 1/ep a GPU (of its stage's blocks
//    in a pipeline); each MoE layer's all-to-all of the assignments
//    (b·s·top_k rows of h, s the tokens a GPU holds of a sequence: its 1/cp
//    under context parallelism; the share bound for other GPUs) there and back,
//    forward and backward, over the node's link when ep GPUs fit a node, not
//    overlapped; ZeRO's collectives over dp / ep GPUs, and the parameters
//    outside the experts all-reduced over the ep GPUs once a step. Tensor
//    parallelism replicates the experts: without sequence parallelism every
//    GPU of the group computes and exchanges every token's (with it, its 1/t
//    slice), and a mixture-of-experts block has one tensor-parallel region
//    (the attention's).
//  - context parallelism (cut from data parallelism: cp of the dp GPUs split
//    each sequence, dp / cp data replicas read batches; ZeRO over all dp):
//    a GPU computes and keeps 1/cp of every token's work (attention balanced
//    by the zigzag split) and its tensor-parallel and stage transfers carry
//    its s/cp tokens; per block and micro-batch memory_estimator.h's
//    context_parallel_layer_bytes: Ulysses' all-to-alls over the Ulysses
//    group's link, not overlapped; the ring's forward hops each hidden behind
//    a ring step's attention (the block's forward attention / ring ranks) up
//    to its length, its backward hops (k, v and their fp32 gradients) not
//    overlapped; a recomputed forward exchanges again. A group's link: the
//    node's when its tp x cp GPUs (tp x Ulysses size for Ulysses' part) sit
//    in one node (tp and dp fastest), the network's otherwise.
//  - offload: the gradient shard down and the parameters up over the host link
//    a step (offload_param: the parameters up forward and backward every
//    micro-batch), and the host optimizer's step at `host_updates_per_s` for
//    all the node's shards; not overlapped.
// Ranks follow Topology's default order (tp fastest, then dp, then pp).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stratum/models/model_config.h"
#include "stratum/planning/memory_estimator.h"

namespace stratum::planning {

struct Hardware {
  std::string gpu = "a100-80gb";
  double gpu_memory = 80.0 * double(1ull << 30);  // bytes a GPU
  // Kept free of the estimate for the CUDA context, NCCL's buffers and the
  // allocator's fragmentation: a layout fits within (1 - margin) x gpu_memory.
  double memory_margin = 0.10;
  double host_memory = 0;             // bytes a node for offloaded states; 0: not checked
  double peak_flops = 312e12;         // dense 16-bit FLOP/s a GPU (fp32 training: the same figure)
  double mfu = 0.58;                  // of the peak, at the model's FLOPs
  double node_bandwidth = 230e9;      // a collective's bus bandwidth inside a node, bytes/s
  double network_bandwidth = 25e9;    // across nodes, bytes/s a GPU
  double host_link_bandwidth = 25e9;  // GPU <-> host, bytes/s a GPU and direction
  double host_updates_per_s = 1e10;   // the host optimizer's parameter updates a second, a node
};
// A named GPU: "a100-40gb", "a100-80gb", "h100", "h200". Throws Error listing them.
Hardware hardware_preset(const std::string& gpu);
std::vector<std::string> hardware_names();

struct Layout {
  int64_t dp = 1, pp = 1, tp = 1;
  int64_t ep = 1;  // expert parallelism: divides dp (the GPUs holding the same experts: dp / ep)
  // Context parallelism: each sequence over cp of the dp GPUs (cp divides dp;
  // dp / cp data replicas: global batch = micro_batch x micro_batches x dp / cp),
  // Ulysses over cp_ulysses of them: 1 ring, cp Ulysses, between hybrid.
  int64_t cp = 1, cp_ulysses = 1;
  bool sequence_parallel = false;
  int zero_stage = 0;
  bool offload_optimizer = false, offload_param = false;
  int64_t micro_batch = 1, micro_batches = 1;  // micro_batches: gradient_accumulation_steps
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;  // pp > 1 only
  int64_t virtual_stages = 1;
  bool checkpointing = false;
};
// "dp 8 x pp 4 x tp 2 (sp), ZeRO-1, offload optimizer, micro 2 x 8, 1f1b, checkpointing";
// context parallelism as ", sequence over 4 (ring)".
// The method as the plan's table shows it: "-", "4 ring", "8 uly", "8 hyb2".
std::string describe_context(const Layout& layout);
std::string describe(const Layout& layout);

// What the command line or a ds_config.json fixes; unset: searched.
struct LayoutChoices {
  std::optional<int> zero_stage;
  std::optional<bool> offload_optimizer, offload_param;
  std::optional<int64_t> pp, tp, ep, micro_batch, micro_batches, virtual_stages;
  std::optional<int64_t> cp, cp_ulysses;
  std::optional<ContextMethod> cp_method;
  std::optional<pipeline::ScheduleKind> schedule;
  std::optional<bool> checkpointing, sequence_parallel;
};

struct PlanRequest {
  // The model's shape (set_model_shape) or only its parameters; the cluster's
  // nodes and GPUs, seq_len, param_bytes, grad_bytes as memory_estimator reads
  // them. Batch, pipeline and tensor-parallel fields are the layouts'.
  EstimateInput shape;
  std::optional<models::ModelConfig> model;  // unset (parameters only): data parallelism only
  Hardware hardware;
  int64_t global_batch = 0;  // sequences a step (train_batch_size)
  LayoutChoices fixed;
};

struct StepTime {
  double pipeline = 0;         // forward and backward of every micro-batch (the makespan with a pipeline)
  double compute = 0;          // of which the busiest stage computes
  double bubble = 0;           // of which the busiest stage waits (pipeline - its busy time)
  double tensor_parallel = 0;  // of the busiest stage's busy time: its tensor-parallel collectives
  double transfers = 0;        // of it: receiving activations and gradients between stages
  double all_to_all = 0;       // of it: expert parallelism's token exchanges
  double context_parallel = 0; // of it: Ulysses' all-to-alls and the ring's hops attention does not hide
  double data_parallel = 0;    // exposed gradient and parameter collectives (the slowest stage's)
  double offload = 0;          // host transfers and the host optimizer
  double total = 0;
};

struct LayoutEstimate {
  Layout layout;
  int busiest_stage = 0;  // the pipeline stage whose GPUs need the most memory
  double states = 0, activations = 0, buffers = 0, gpu_bytes = 0;  // per GPU, at that stage
  double host_bytes_per_node = 0;                                  // the busiest node's offloaded states
  bool fits = false;
  std::string limit;  // why not: "GPU memory" or "host memory"
  StepTime time;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs a second over the cluster's peak
};

// One layout. Throws Error naming the numbers when it cannot run: dp x pp x tp
// not the cluster's GPUs, tp not dividing a node's GPUs or the model's heads,
// cp not dividing dp, the sequence not splitting over cp (a multiple of cp,
// of 2 x cp with a ring), Ulysses not dividing the heads a tensor-parallel
// GPU holds, cp without a model's shape, the batch not micro_batch x
// micro_batches x dp / cp,
// ZeRO-3 or offload_param with a pipeline, a schedule's own conditions.
LayoutEstimate estimate_layout(const PlanRequest& request, const Layout& layout);

struct Plan {
  std::vector<LayoutEstimate> fitting;  // fastest first
  int64_t considered = 0;               // layouts estimated (fitting or not)
  // The least memory of those that do not fit (the one to report when none does).
  std::optional<LayoutEstimate> closest;
};
// Every layout the fixed choices allow: tp a divisor of a node's GPUs the
// model splits, pp a divisor of the rest up to the layers there are, every
// ZeRO stage and offload the engine supports at that pp, micro-batches the
// powers of two dividing the global batch over dp, every schedule (interleaved
// at 2 chunks where the micro-batches allow), checkpointing off and on,
// sequence parallelism off and on with tp > 1, and context parallelism as
// below. Throws Error for a request nothing can satisfy (no global batch, a
// fixed choice no layout has).
//
// Context parallelism is searched when the request fixes any of it (cp, the
// method, the Ulysses size) or the sequence is long (kContextSearchSeq tokens
// or more); then cp runs over the divisors of dp that leave each GPU at
// least kContextMinTokens tokens (a fixed cp: that one), each with the ring,
// Ulysses where the heads split, and hybrid at the largest Ulysses size
// strictly between 1 and cp that splits them (every such size when hybrid or
// the Ulysses size is fixed). Short sequences are not split: their GEMMs
// would shrink for no memory they need.
inline constexpr int64_t kContextSearchSeq = 16384;
inline constexpr int64_t kContextMinTokens = 4096;
// Whether plan_layouts searches cp > 1 for `request` (the rule above).
bool context_parallel_searched(const PlanRequest& request);
Plan plan_layouts(const PlanRequest& request);

// The fewest GPUs (whole nodes of the request's GPUs per node, up to
// max_nodes) on which each ZeRO stage and offload choice fits the model by
// data parallelism alone (pp = tp = 1) at micro-batch 1 with checkpointing;
// gpus 0 when none does. The states' floor (what no GPU count divides away)
// says why.
struct FewestGpus {
  int zero_stage = 0;
  bool offload_optimizer = false, offload_param = false;
  int64_t gpus = 0;
  double gpu_bytes = 0;    // at that count (0 when none fits)
  double host_bytes_per_node = 0;  // offloaded states a node at that count
  double floor_bytes = 0;  // the states and activations as the GPU count grows without bound
};
std::vector<FewestGpus> fewest_gpus_data_parallel(const PlanRequest& request, int64_t max_nodes);

// The plan as stratum-estimate --plan prints it: the request and the model
// of time, the `rows` fastest layouts that fit with their memory and time,
// and the fewest GPUs for data parallelism alone.
std::string format_plan(const PlanRequest& request, const Plan& plan, size_t rows);

}  // namespace stratum::planning
