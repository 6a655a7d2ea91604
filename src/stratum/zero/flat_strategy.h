#pragma once
// What the three ZeRO stages share: the flat parameter buffer the module's
// parameters live in, gradient hooks that count a bucket's parameters as
// backward finishes them, and reductions in flight (with DeepSpeed's pre/post
// scaling and an optional wider dtype on the wire). Internal to zero/.
#include <algorithm>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "stratum/nn/embedding.h"
#include "stratum/nn/linear.h"
#include "stratum/zero/bucket_param_gather.h"
#include "stratum/zero/reduced_grad_norm.h"
#include "stratum/zero/strategy.h"

namespace stratum::zero {

class FlatStrategy : public ZeroStrategy, public nn::RowGradientSink, public nn::WeightGradSink {
 public:
  FlatStrategy(const ZeroOptions& options, std::vector<at::Tensor> params, std::vector<std::string> names,
               at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp);
  ~FlatStrategy() override;

  int stage() const override { return options_.stage; }
  const FlatLayout& layout() const override { return layout_; }
  std::vector<OptimizerSegment>& segments() override { return segments_; }

  // Stages 0-2: the flat buffer holds every parameter whole.
  void for_each_full_param(const std::function<void(int, const at::Tensor&)>& fn) override;

  at::Tensor reduced_grad_sq_norm() override;

  // Called by the post-accumulate-grad hook of parameter `index` (autograd's thread).
  virtual void on_grad_ready(int index) = 0;
  // Before on_grad_ready (and for row gradients): parameter `index` got a gradient.
  void mark_reached(int index) { reached_[index] = 1; }
  std::vector<std::string> parameters_without_gradient() const override;
  void forget_reached() override { std::fill(reached_.begin(), reached_.end(), 0); }

  // A row-fed parameter's lookup gradient (nn/embedding.h), kept for the
  // window's exchange.
  void take_rows(const at::Tensor& weight, const at::Tensor& ids, const at::Tensor& grad_rows) override;

  // options_.fuse_weight_grads (every stage): nn::linear's weight-gradient GEMM
  // writes into where the hook would have put the gradient (fused_destination);
  // the hook then only does the bookkeeping.
  at::Tensor weight_grad_destination(const at::Tensor& weight, bool* accumulate) override;
  void weight_grad_written(const at::Tensor& weight) override;

  // Stages 1/2 (param_gather_ set): segment b is this rank's slice of bucket b.
  void segment_updated(size_t segment) override;
  void wait_params() override;
  LayerParamGatherer* gatherer() override;

 protected:
  // Stage 3: `layout` given, the parameters stay where they are (no flat buffer).
  FlatStrategy(const ZeroOptions& options, FlatLayout layout, std::vector<at::Tensor> params,
               at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp);

  struct InFlight {
    distributed::WorkPtr work;
    at::Tensor wire;     // what the collective reduced (the result, in comm dtype; may be dest itself)
    at::Tensor dest;     // where the averaged gradient goes
    bool accumulate;     // dest += result (stage 2 across micro-steps), else dest = result
    at::Tensor keep;     // input kept alive until done
  };

  void install_hooks();
  // Registers as the weight-gradient sink of options_.fused_params.
  void register_weight_grad_sinks();
  // Where the fused GEMM writes parameter `index`'s gradient, and whether it
  // adds to what is there (a later micro-step, or a second write this backward).
  virtual at::Tensor fused_destination(int index, bool* accumulate) = 0;
  void reset_pending();
  // Counts one finished parameter; true when its bucket has them all.
  bool count_ready(int index);
  // Reduces `grads` (a bucket) over DP into `dest`: all-reduce when dest is the
  // whole bucket, reduce-scatter when dest is this rank's slice (straight into
  // it when the dtypes match and nothing accumulates: in place when dest is
  // the slice of grads). Averages with the collective itself (NCCL's avg)
  // unless prescale_gradients / gradient_predivide_factor ask otherwise.
  void launch_reduction(const at::Tensor& grads, at::Tensor dest, bool accumulate, bool scatter);
  // A final reduction's destination, for the clipping norm (reduced_grad_norm.h):
  // in place (its value once `work` completes; null work: now, on the current
  // stream) or not (the window's norm is then the engine's to compute).
  void note_final_gradient(const distributed::WorkPtr& work, const at::Tensor& dest, bool in_place);
  // Before gradients are rewritten (zero_gradients): norms still reading them finish first.
  void forget_grad_norm();
  // Row-fed parameters (options_.row_gradient_params) have a bucket each. A
  // row-only one (no dense gradient: an untied embedding) is never reduced:
  // at the boundary exchange_rows() fills it. A tied one is reduced as usual
  // and add_tied_rows() adds the rows after.
  bool row_only_bucket(int b) const { return !row_bucket_.empty() && row_bucket_[b] == kRowOnly; }
  bool row_only(int index) const { return !row_fed_.empty() && row_fed_[index] == kRowOnly; }
  // The averaged gradient of row bucket b over DP from every rank's rows of
  // this window (an all-gather of the rows, the ids and their counts), written
  // (or added, `add`) into `dest`, which holds the bucket's elements
  // [dest_offset, dest_offset + dest.numel()). Collective; ends the window's rows.
  void exchange_rows(int b, const at::Tensor& dest, int64_t dest_offset, bool add = false);
  // dest[0, end - begin) += the mean over DP ranks of the dense gradient that
  // `rows` [N, hidden] looked up at `ids` [N] give a [vocab, hidden] weight,
  // restricted to its flattened elements [begin, end).
  void add_mean_of_rows(const at::Tensor& ids, const at::Tensor& rows, int64_t vocab, const at::Tensor& dest,
                        int64_t begin, int64_t end) const;
  // At the boundary, once every bucket is launched: waits for the reductions
  // and adds the exchanged rows to each tied row-fed bucket.
  void add_tied_rows();
  // Where bucket b's reduced gradient lives on this rank, and the offset of
  // its first element in the bucket (the whole bucket, or this rank's slice).
  virtual std::pair<at::Tensor, int64_t> reduced_region(int b) const = 0;
  // Finishes reductions oldest first until at most `keep` are in flight (bounds
  // the gradient buffers alive during backward).
  void wait_in_flight(size_t keep = 0);
  // Rank r's slice of bucket b in a flat buffer.
  at::Tensor slice_of(const at::Tensor& flat, int b) const;
  at::Tensor bucket_of(const at::Tensor& flat, int b) const;
  // Stages 2/3 stage a bucket's gradients of one micro-step in a buffer of
  // grad_dtype_ before reducing it: each parameter's range is written by its
  // gradient's first arrival and added to after (a parameter reached twice);
  // what no gradient wrote (padding, parameters backward did not reach) is
  // zeroed by zero_unstaged just before the reduction. No zero fill of whole
  // buckets (~2 ms a step on gpt2-1.3b).
  // A fused GEMM (fused_destination) writes the range itself: staging it then
  // only records that.
  at::Tensor new_staging(int b);
  at::Tensor staging_slot(const at::Tensor& staging, int index) const;  // parameter index's range, flat
  void stage_gradient(const at::Tensor& staging, int index, const at::Tensor& grad);
  void zero_unstaged(const at::Tensor& staging, int b) const;
  // Stages 1/2: one optimizer segment per bucket (this rank's slice of it), and
  // the parameter all-gathers that follow the optimizer (lazy with
  // overlap_param_gather and `layers`). params16: the device's flat slices
  // with device_params16, the host buffer's with offload, else none.
  void make_bucket_segments(const at::Tensor& master, const at::Tensor& grad_shard, const at::Tensor& host_params16,
                            const LayerParams* layers);
  // Stages 1/2: all-gathers the buckets segment_updated did not start (a
  // checkpoint load) and, unless lazy, waits for them all.
  void publish_bucket_params();
  // This rank's slices of the flat parameters as fp32 masters: on the device, or
  // on the host with offload_optimizer.
  at::Tensor make_shard_master() const;
  // An fp32 master for `values` (a shard in the model dtype), placed as above.
  at::Tensor make_master(const at::Tensor& values) const;
  // offload_optimizer with 16-bit training: the host buffer for the CPU Adam's
  // rounded copy of the updated shard; undefined otherwise.
  at::Tensor make_params16(int64_t numel) const;
  // A host tensor, pinned when the model is on a GPU and pin_memory is set.
  at::Tensor host_empty(int64_t numel, at::ScalarType dtype) const;

  ZeroOptions options_;
  FlatLayout layout_;
  std::vector<at::Tensor> params_;
  at::ScalarType model_dtype_;
  // Stages 0-2 over several ranks accumulate gradients in the wider of the
  // model and wire dtypes (fp32 for 16-bit training by default): the wire
  // needs no cast, the optimizer reads them as they are, and accumulation over
  // micro-steps keeps fp32 precision (as DeepSpeed's bf16 optimizer and DDP
  // over fp32 weights). One rank: the model's dtype.
  at::ScalarType grad_dtype_;
  std::shared_ptr<distributed::Communicator> dp_;
  c10::Device device_;  // where the model trains
  at::Tensor flat_params_;
  std::vector<OptimizerSegment> segments_;
  std::unique_ptr<BucketParamGather> param_gather_;  // stages 1/2
  std::vector<int> pending_;           // parameters still to finish, per bucket
  std::vector<bool> launched_;         // bucket reduction started this micro-step
  std::deque<InFlight> in_flight_;
  bool armed_ = false;                 // this micro-step's hooks launch reductions
  bool final_reductions_ = false;      // this micro-step's reductions give the window's gradients
  std::unique_ptr<ReducedGradNorm> grad_norm_;  // over several ranks, made at the first final reduction
  double pre_scale_ = 1.0, post_scale_ = 1.0;
  bool average_on_wire_ = false;  // the plain mean: the collective's avg does both scalings
  std::vector<char> reached_;     // by parameter: a gradient arrived since forget_reached()
  std::vector<char> staged_;      // by parameter: written into its bucket's current staging buffer
  std::vector<char> fused_;       // by parameter: this backward's fused GEMM wrote its gradient
  std::unordered_map<const void*, int> sink_index_;  // TensorImpl -> parameter (weight-gradient sinks)
  // Row-fed parameters (several ranks, stages 0-2): by parameter, by bucket,
  // and the rows autograd handed over this window.
  static constexpr char kRowOnly = 1, kRowAndDense = 2;
  std::vector<char> row_fed_, row_bucket_;
  struct TakenRows {
    int param;
    at::Tensor ids, rows;
  };
  std::vector<TakenRows> taken_rows_;
};

// Stages 0 and 1: whole gradients in one flat buffer, accumulated across
// micro-steps; on the boundary micro-step each bucket is reduced as soon as
// its parameters are done (overlap_comm) or after backward.
//
// Gradients live in the flat buffer (grad_dtype_), not in .grad: autograd
// hands each parameter's whole gradient to the hook, which writes it into its
// slot on the window's first backward (no zeroing, no read-back) and adds it
// on the later micro-steps, then drops it.
class BoundaryReducedStrategy : public FlatStrategy {
 public:
  using FlatStrategy::FlatStrategy;

  void prepare_backward(bool boundary) override;
  void on_grad_ready(int index) override;
  void finish_backward() override;
  void wait_gradients() override { wait_in_flight(); }
  void zero_gradients() override;

 protected:
  // The flat gradient buffer (zeros: padding reduces as zero); registers the
  // weight-gradient sinks.
  void init_flat_grads();
  at::Tensor fused_destination(int index, bool* accumulate) override;
  // Starts bucket b's reduction (and marks it launched).
  virtual void launch(int b) = 0;

  at::Tensor flat_grads_;

 private:
  at::Tensor grad_slot(int index) const;

  bool fresh_window_ = true;  // the next backward is the window's first
  std::vector<bool> written_;  // parameter i's slot holds this window's gradient
};

}  // namespace stratum::zero
