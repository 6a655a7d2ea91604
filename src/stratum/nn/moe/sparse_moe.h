#pragma once
// A mixture-of-experts feed-forward block: a router over num_experts SwiGLU
// experts, top_k a token, the experts' outputs summed with the router's
// weights; optionally shared experts every token goes through (DeepSeek).
// Names as Hugging Face stores them: the router's "gate.weight" [E, C], each
// expert "experts.<e>.<gate>.weight" / "<up>" / "<down>" (Mixtral: w1, w3,
// w2; Qwen3-MoE: gate_proj, up_proj, down_proj), "shared_experts.*".
//
// Dropless by default: every assignment is computed, the experts' rows in
// one grouped GEMM each way (nn/moe/grouped_linear.h). With a capacity factor
// f, expert e takes at most ceil(f T k / E) of the T tokens' k assignments,
// those with the highest router weight ("probs") or the first in order
// ("position"); a dropped assignment adds nothing to its token (the residual
// carries it), and the drops are counted (routing_record.h). Experts with
// LoRA adapters or a 4-bit base (QLoRA, models/lora.h) run one at a time
// instead, each through nn/lora_linear.h's GEMMs.
//
// Under expert parallelism over a group of P ranks, rank r holds experts
// [r E / P, (r + 1) E / P) (named by their index in the whole layer), routes
// its own tokens, sends each assignment's row to the rank of its expert and
// gets the expert's output back (nn/moe/token_exchange.h); the router and the
// shared experts are whole on every rank.
//
// Under tensor parallelism every rank holds every expert (of its expert-
// parallel share). With sequence parallelism a rank's input is its slice
// [B, T / n, C] of the micro-batch: it routes and computes its own tokens
// (no rank repeats another's expert work), and the balancing terms and the
// recorded load are the whole micro-batch's: the tokens per expert are
// gathered over the group (one small all-gather a layer), each rank's terms
// are its share (load_balancing.h), and the router's and experts' gradients
// are summed over the group like every weight sequence parallelism reads a
// part of. A capacity applies to each rank's tokens (as Megatron-Core's
// token dispatchers under sequence parallelism). Under context parallelism
// (the stack's SequenceLayout holding a context shard) the same over the
// context-parallel group (and its tensor-parallel ranks under sequence
// parallelism too), whose ranks' gradients are averaged as data-parallel
// ranks' are: a share's gradient enters cp times, so that the average is
// the micro-batch's term's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "stratum/nn/mlp.h"
#include "stratum/nn/moe/router.h"
#include "stratum/nn/moe/routing_record.h"
#include "stratum/nn/moe/token_exchange.h"
#include "stratum/nn/parameter_modules.h"
#include "stratum/nn/sequence_layout.h"
#include "stratum/nn/tensor_parallel/mappings.h"

namespace stratum::nn::moe {

enum class DropPolicy { probs, position };
enum class Balancing { none, aux_loss, sequence_aux_loss };

struct ExpertNames {
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
};

struct MoEOptions {
  int64_t hidden = 0;
  int64_t ffn_hidden = 0;         // an expert's inner width
  int64_t shared_ffn_hidden = 0;  // the shared experts' (0: none)
  RouterOptions router;
  ExpertNames names;
  double capacity_factor = 0;  // 0: dropless
  DropPolicy drop_policy = DropPolicy::probs;
  Balancing balancing = Balancing::aux_loss;
  double aux_loss_coeff = 0;
  double z_loss_coeff = 0;
  // > 0: aux-loss-free balancing, a per-expert bias on the choice moved by this much a step.
  double expert_bias_rate = 0;
  bool recompute_activation = false;  // the experts' SwiGLU output recomputed in backward
};

// One expert: down(silu(gate(x)) * up(x)), registered gate, up, down (so that
// ZeRO's flat buffers hold gate and up side by side: one GEMM reads both).
class ExpertImpl : public torch::nn::Module {
 public:
  ExpertImpl(int64_t hidden, int64_t ffn_hidden, const ExpertNames& names, c10::Device device);
  Linear gate{nullptr}, up{nullptr}, down{nullptr};
};

class SparseMoEImpl : public torch::nn::Module {
 public:
  // `layer`: the block's index, under which its routing is recorded in `record`.
  // `tp`: the model's tensor-parallel group (only its sequence parallelism matters here).
  SparseMoEImpl(const MoEOptions& options, int64_t layer, std::shared_ptr<RoutingRecord> record,
                c10::Device device = c10::kCPU, ExpertParallel ep = {}, tp::TensorParallel tp = {});
  // [B, T, C] (or [tokens, C]) -> the same shape.
  at::Tensor forward(const at::Tensor& x);

  // Aux-loss-free balancing (DeepSeek-V3): bias_e += rate * sign(mean - load_e)
  // for `load` the tokens each expert received ([E], summed over the step and
  // the data-parallel ranks), rate the options' expert_bias_rate.
  void update_expert_bias(const at::Tensor& load);
  // fp32 [E] on the parameters' device (undefined without expert_bias).
  const at::Tensor& expert_bias() const { return expert_bias_; }
  void set_expert_bias(const at::Tensor& bias);

  const MoEOptions& options() const { return options_; }
  int64_t layer() const { return layer_; }
  const std::shared_ptr<RoutingRecord>& record() const { return record_; }

  // This rank's experts, first_expert() onwards.
  int64_t first_expert() const { return first_expert_; }
  const ExpertParallel& expert_parallel() const { return ep_; }

  Linear gate{nullptr};
  std::shared_ptr<torch::nn::Module> experts;  // children named by their index in the layer
  std::shared_ptr<const SequenceLayoutSlot> layout;  // the stack's (null: no context parallelism here)
  std::vector<std::shared_ptr<ExpertImpl>> expert_list;  // this rank's, in order
  std::shared_ptr<SwiGLUMLPImpl> shared_experts;

 private:
  // The experts' output for rows sorted by expert, counts[e] for this rank's expert e.
  at::Tensor run_experts(const at::Tensor& rows, const std::vector<int64_t>& counts);
  // Experts with LoRA adapters or a 4-bit (NF4) base: one expert at a time,
  // each as a LoRA SwiGLU MLP (nn/lora_linear.h: gate and up in one GEMM,
  // their adapters in one each way, NF4 weights dequantized per GEMM).
  bool experts_adapted() const;
  at::Tensor run_adapted_experts(const at::Tensor& rows, const std::vector<int64_t>& counts);
  // The same for every expert of the layer, the rows sent to and back from their experts' ranks.
  at::Tensor remote_experts(const at::Tensor& rows, const std::vector<int64_t>& counts);

  // The training terms and the record's load, from the routing of this
  // rank's tokens and `host_counts`, every rank's tokens per expert [n, E]
  // of the n ranks holding a slice of the micro-batch (n = 1 unless its
  // sequences are split). `capacity` < 0: dropless.
  struct Balance {
    at::Tensor aux, z;                            // this rank's shares (undefined: off)
    at::Tensor whole_aux, whole_z, whole_routed;  // the micro-batch's, for the record
    int64_t whole_dropped = 0, whole_assigned = 0;
  };
  // The ranks holding a slice of each of this micro-batch's sequences, this
  // one included: the tensor-parallel group under sequence parallelism, the
  // context-parallel group, or both (tensor-parallel ranks inside each
  // context-parallel one). Neither: the rank holds them whole.
  struct SequenceSplit {
    std::shared_ptr<distributed::Communicator> tp, cp;  // null: not split that way
    int64_t size() const;
    int64_t rank() const;  // cp rank x tp size + tp rank
    // Every rank's counts [size(), E] on the host, in rank() order (counts: [E] on the group's device).
    at::Tensor gather(const at::Tensor& counts) const;
    void all_reduce(at::Tensor& t, const char* what) const;  // summed over every rank
  };
  SequenceSplit sequence_split() const;
  Balance balance(const at::Tensor& x, const at::Tensor& logits, const Routing& r, const at::Tensor& routed,
                  const at::Tensor& host_counts, int64_t capacity, const SequenceSplit& split) const;

  MoEOptions options_;
  int64_t layer_;
  ExpertParallel ep_;
  tp::TensorParallel tp_;
  int64_t first_expert_ = 0;
  std::shared_ptr<RoutingRecord> record_;
  at::Tensor expert_bias_;
};

// Throws stratum::Error naming each problem of `options` (the router's, a
// capacity factor below 0, coefficients below 0, dimensions).
void check(const MoEOptions& options);

}  // namespace stratum::nn::moe
