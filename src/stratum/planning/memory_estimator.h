#pragma once
// Memory per device before a run: model states for every ZeRO stage and
// offload choice (the ZeRO paper's accounting, as Stratum's strategies hold
// them), and activations for a micro-batch (which DeepSpeed's estimators leave
// out). With pipeline parallelism, per stage: the stage's share of the
// layers (cut as the engine cuts them) and the micro-batches its schedule
// keeps in flight (from the schedule simulator). Pure code; `stratum-estimate`
// prints it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stratum/models/model_config.h"
#include "stratum/pipeline/partition.h"
#include "stratum/pipeline/schedule.h"

namespace stratum::planning {

struct EstimateInput {
  int64_t params = 0;                // Ψ, trainable parameters
  int64_t largest_layer_params = 0;  // ZeRO-3 gathers one layer at a time (and prefetches the next)
  int64_t layers = 0, hidden = 0, heads = 0, vocab = 0;  // for activations (0: not estimated)
  int64_t kv_heads = 0;     // grouped-query attention (0: as heads)
  int64_t ffn = 0;          // MLP inner size (0: 4 x hidden)
  bool gated_mlp = false;   // SwiGLU (LLaMA): gate and up (stacked) are kept
  // The MLP's activation output is not kept (ModelConfig::recompute_mlp_activation).
  bool mlp_activation_recomputed = false;
  // Bytes a logit holds at the loss. 0: this build's loss on a GPU (the fused
  // cross-entropy: the 16-bit logits and their gradient, which the LM head
  // reads in place). Runs measured before: 12 with at::cross_entropy on an
  // fp32 copy; 3 x param_bytes when the head padded a copy of the gradient
  // (a vocabulary not a multiple of 64, before the head read it in place).
  double loss_bytes_per_logit = 0;
  int64_t nodes = 1, gpus_per_node = 1;
  int64_t micro_batch = 1, seq_len = 1024;
  bool activation_checkpointing = false;
  int64_t param_bytes = 2;  // 2: bf16/fp16 training with fp32 masters; 4: fp32 training
  // Bytes of a gradient at stages 0-2. 0: this build's, those of the wire
  // (fp32, 4) over several GPUs and param_bytes on one. Runs measured before
  // kept them in the model's dtype: param_bytes.
  int64_t grad_bytes = 0;
  // data_types.grad_accum_dtype "fp32": ZeRO-3's gradient shard in fp32, not the model's dtype.
  bool grad_accum_fp32 = false;
  // Pipeline parallelism: the GPUs form `pipeline_stages` stages of GPUs /
  // stages data-parallel ranks each (1: no pipeline).
  int64_t pipeline_stages = 1;
  int64_t virtual_stages = 1;  // model chunks a stage holds (the interleaved schedule)
  int64_t micro_batches = 1;   // a step's micro-batches (gradient_accumulation_steps)
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  // The layers the engine's pipeline cuts, with the parameters each owns
  // (set_model_shape): the embedding, every block, the final norm, the LM head.
  std::vector<pipeline::LayerWeight> layer_weights;
  // A tied LM head borrows the embedding: the stage holding the head keeps a copy.
  int64_t tied_embedding_params = 0;
  // Tensor parallelism: groups of `tensor_parallel` GPUs hold one copy of the
  // model in shards (GPUs / tensor_parallel data-parallel ranks);
  // `tp_params`: what one rank holds (set_model_shape, from the preset);
  // `sequence_parallel`: norms on 1/tensor_parallel of the sequence.
  int64_t tensor_parallel = 1;
  int64_t tp_params = 0;
  bool sequence_parallel = false;
  // A mixture of experts (set_model_shape): every layer's routed experts'
  // parameters, the experts a layer, a token's, an expert's inner width.
  int64_t expert_params = 0, experts = 0, top_k = 0, moe_ffn = 0;
  // Expert parallelism (cut from data parallelism, as the engine's): each GPU
  // holds 1/expert_parallel of the experts; ZeRO partitions over the GPUs
  // holding the same experts (GPUs / expert_parallel); tokens go to their
  // experts' GPUs and back by all-to-all.
  int64_t expert_parallel = 1;
  // Context parallelism (cut from data parallelism, as the engine's): each
  // sequence split over `context_parallel` of the data-parallel GPUs, each
  // keeping the activations (and the logits) of seq_len / context_parallel
  // tokens; ZeRO still partitions over every data-parallel GPU, these
  // included. `context_ulysses`: the GPUs of the group that trade the
  // sequence for heads by all-to-all (context_parallel_ulysses_size below).
  int64_t context_parallel = 1;
  int64_t context_ulysses = 1;
  // Long sequences (ModelConfig's fields, set_model_shape): the dense MLP run
  // over tiles of this many of a micro-batch's tokens, keeping none of its
  // intermediates between forward and backward; the LM head and loss fused
  // over tiles, keeping a float a token and no logits (0: untiled).
  int64_t tiled_mlp_tokens = 0, tiled_loss_tokens = 0;
  // activation_checkpointing.cpu_checkpointing: the checkpointed blocks'
  // inputs kept in pinned host memory rather than on the GPU; with
  // cpu_checkpointing_layers only the first this many blocks' (of a GPU's
  // layers, a pipeline stage's), the rest on the GPU. Unset: every block's.
  bool cpu_checkpointing = false;
  std::optional<int64_t> host_checkpoint_blocks;
  // FP8 projections (the config's fp8 section, nn/float8): at ZeRO 0-2 each
  // projection keeps its weight cast for the optimizer step, W and its
  // transposed copy, a byte each; at ZeRO-3 only the layer in use is cast.
  // `block_projection_params`: one block's projection weights on one
  // tensor-parallel rank (set_model_shape); `fp8_share`: the share of them
  // cast (fp8.exclude keeps the rest in bf16; models::fp8_coverage), as an
  // average over the blocks.
  bool fp8 = false;
  int64_t block_projection_params = 0;
  double fp8_share = 1.0;
};

// Context parallelism's methods (the config's context_parallel.method): ring
// (key/value blocks passed around the group), Ulysses (the heads exchanged by
// all-to-all), hybrid (Ulysses over ulysses_size consecutive GPUs inside each
// ring rank).
enum class ContextMethod { ring, ulysses, hybrid };
const char* context_method_name(ContextMethod method);
// "ring", "ulysses", "hybrid"; throws Error listing them.
ContextMethod parse_context_method(const std::string& name);
// The method a group of `cp` GPUs runs with Ulysses over `ulysses` of them:
// 1 ring, cp Ulysses, strictly between hybrid.
ContextMethod context_method_of(int64_t cp, int64_t ulysses);

// Bytes one GPU sends for one attention layer and one micro-batch under
// context parallelism (all zero without it), t the tensor-parallel size, u
// the Ulysses size, r = cp / u the ring's ranks, s / cp the tokens a GPU holds:
//  - Ulysses: forward an all-to-all of q, k and v ((u-1)/u of
//    b x s/cp x (heads + 2 kv_heads)/t x head_dim) and one of the attention
//    output ((u-1)/u of b x s/cp x heads/t x head_dim); backward the same.
//  - ring: forward r-1 hops of the GPU's k and v (b x s/cp x 2 kv_heads/t x
//    head_dim, as the model's dtype); backward r-1 hops of k and v again and
//    r hops of their fp32 gradients.
struct ContextTraffic {
  double ulysses_forward = 0, ulysses_backward = 0;
  double ring_forward = 0, ring_backward = 0;
  int64_t ring_hops = 0;  // forward hops (r - 1); the backward's k, v hops as many, their gradients' one more
  double forward() const { return ulysses_forward + ring_forward; }
  double backward() const { return ulysses_backward + ring_backward; }
};
ContextTraffic context_parallel_layer_bytes(const EstimateInput& in);
// A micro-batch's context-parallel traffic a GPU, every block forward and
// backward (a recomputed forward's again not counted). 0 without it.
double context_parallel_bytes(const EstimateInput& in);
// The exchange's buffers a GPU holds at once, in one attention layer: Ulysses'
// q, k, v sent and received; the ring's block in hand and the one arriving,
// with (backward) their fp32 gradients; hybrid the larger. 0 without it.
double context_parallel_buffer_bytes(const EstimateInput& in);
// Why `in`'s context parallelism cannot run ("" when it can): the Ulysses
// size not dividing the group, the sequence not splitting (a multiple of cp,
// of 2 x cp with a ring), sequence parallelism's split of a GPU's part, and
// (with the model's heads) Ulysses' heads per tensor-parallel rank.
std::string context_parallel_problem(const EstimateInput& in);

// Bytes one GPU sends (and receives) by all-to-all for one micro-batch,
// forward and backward: each MoE layer's assignments (micro-batch x the
// tokens it holds of a sequence x top_k rows of hidden) to the other
// expert-parallel ranks and back, twice
// (the backward returns their gradients). 0 without expert parallelism.
double all_to_all_bytes(const EstimateInput& in);

// Sets the fields `model` determines (a preset with its overrides):
// parameters, the largest layer (a transformer block or the embedding table)
// the shape the activations depend on, and the layers a pipeline cuts. Batch,
// sequence, GPUs, precision and pipeline settings are left as they are; the
// parameters a tensor-parallel rank holds follow in.tensor_parallel.
void set_model_shape(EstimateInput& in, const models::ModelConfig& model);

struct StateEstimate {
  int stage = 0;
  bool offload_optimizer = false, offload_param = false;
  double gpu_bytes = 0;           // per GPU: parameters, gradients, optimizer states kept there
  double cpu_bytes_per_node = 0;  // pinned host memory for offloaded states, all GPUs of a node
};

// Every stage (0-3) x offload choice Stratum supports, in a fixed order.
std::vector<StateEstimate> estimate_model_states(const EstimateInput& in);
// Under expert parallelism, the parameters one GPU holds: its tensor-parallel
// shard of those outside the routed experts (which tensor parallelism
// replicates) and 1/expert_parallel of the experts.
double expert_parallel_params(const EstimateInput& in);
// Activation bytes per GPU for one micro-batch at peak (forward done, backward starting),
// including the logits and what the loss keeps, for the seq_len / context_parallel
// tokens a GPU holds. 0 when the shape is unknown. Under cpu_checkpointing
// the checkpointed inputs are not counted: they are host memory (below).
double estimate_activation_bytes(const EstimateInput& in);
// What one block's backward holds beside its saved activations (gradients,
// FlashAttention's fp32 accumulator, the block's output; under
// cpu_checkpointing the next block's input brought back): part of the above.
double estimate_block_backward_bytes(const EstimateInput& in);
// Pinned host bytes one GPU's checkpointed block inputs take under
// cpu_checkpointing (with activation checkpointing); 0 otherwise.
double estimate_host_checkpoint_bytes(const EstimateInput& in);
// Today's table (pipeline_stages ignored: the whole model on every GPU).
std::string format_estimate(const EstimateInput& in);

// The longest sequence, a multiple of 1024 x context_parallel, that a ZeRO
// stage and offload choice fits in: its model states, a micro-batch's
// activations and context parallelism's buffers within `gpu_limit` bytes a
// GPU, and the node's offloaded states and host checkpoints within
// `host_limit` (<= 0: not checked). 0 when not even one such step fits;
// in.seq_len is ignored. Capped at 2^24 tokens.
// Under cpu_checkpointing with in.host_checkpoint_blocks unset, the blocks
// whose inputs go to the host are chosen too: the fewest that let the GPU
// hold the rest, as activation_checkpointing.cpu_checkpointing_layers would
// set them (written to *host_blocks when given; the layers when no split fits).
int64_t longest_sequence(EstimateInput in, int stage, bool offload_optimizer, bool offload_param, double gpu_limit,
                         double host_limit, int64_t* host_blocks = nullptr);
// The table of longest_sequence for every stage and offload choice.
std::string format_longest(const EstimateInput& in, double gpu_limit, double host_limit);

struct StageEstimate {
  int stage = 0;
  std::string layers;   // "embedding, blocks 0-4"; an interleaved stage's chunks joined by " | "
  int64_t params = 0;   // its layers' own, plus the tied embedding on the head's stage
  // Of them, a mixture of experts' routed experts a GPU holds (1/expert_parallel of its blocks').
  int64_t expert_params = 0;
  int64_t blocks = 0;   // the transformer blocks it runs
  int in_flight = 0;    // most micro-batch chunks held between a forward and the end of its backward
  double activation_bytes = 0;        // per GPU at the stage's peak over the step
  std::vector<StateEstimate> states;  // ZeRO 0-3 x offload over the stage's data-parallel ranks
};

// Every pipeline stage, the layers split by "parameters" as the engine does and
// activations from the schedule's simulated order. Under expert parallelism a
// stage's GPU holds 1/expert_parallel of its blocks' experts, ZeRO over the
// stage's GPUs holding the same experts. Throws stratum::Error naming
// the numbers: stages not dividing the GPUs, more stages x virtual stages than
// layers (or no layers: no model shape), and the schedule's own conditions
// (virtual stages outside interleaved, interleaved micro-batches not a
// multiple of the stages).
std::vector<StageEstimate> estimate_pipeline_stages(const EstimateInput& in);
// The per-stage table at `zero_stage` (0-3), its maximum, and the busiest
// stage for every ZeRO stage and offload choice.
std::string format_pipeline_estimate(const EstimateInput& in, int zero_stage);

}  // namespace stratum::planning
