// ZeRO stage 3: parameters partitioned too. Each layer of a LayerStack is one
// bucket ("unit") of the flat layout; a rank keeps only its slice of every
// unit (16-bit params, gradients and fp32 master/Adam states: 16Ψ/N). The
// layer runner calls before_forward / after_forward / before_backward around
// each layer: a unit is all-gathered into a fresh buffer the layer's
// parameters are rebound to (set_data: same tensors, so autograd's saved
// parameters follow), the next units are prefetched, and a unit is released
// (rebound to an empty tensor) when it will not be reused within
// stage3_max_reuse_distance. In backward a unit's gradients are copied into a
// staging buffer (in the wire's dtype) as autograd finishes them; the last one
// launches the unit's reduce-scatter into this rank's gradient shard and
// releases the unit. Under ZB-H1 (ZeroOptions::reduce_at_window_end) the
// unit is released at the end of its B all the same (W's GEMMs read the saved
// input and the output gradient, never the weight), and the staging buffers
// are reduced once, when the window closes.
// With FP8 projections (gather_in_float8) a layer whose parameters are all
// their weights is gathered as FP8 bytes instead (zero/float8_unit_gather.h).
// Parameters of at most stage3_param_persistence_threshold elements form one
// persistent unit that stays gathered; their gradients (whole, views of one
// buffer) are reduce-scattered at the end of backward.
#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "stratum/nn/deferred_init.h"
#include "stratum/zero/flat_strategy.h"
#include "stratum/zero/float8_unit_gather.h"
#include "stratum/zero/zero_stages.h"

namespace stratum::zero {
namespace {

constexpr size_t kMaxReductionsInFlight = 2;

enum class UnitState { released, in_flight, gathered };

struct Unit {
  UnitState state = UnitState::released;
  at::Tensor full;           // the gathered unit (model dtype; bytes in FP8), while not released
  distributed::WorkPtr gather;      // while in flight
  at::Tensor staging;        // gradients of this micro-step not yet reduced
  int pending = 0;           // parameters whose gradient is still to come
  bool reduced = false;      // reduced at least once this micro-step
  bool persistent = false;
};

// Groups parameters into units: one per layer (its own parameters above the
// persistence threshold), then one persistent unit for the small ones.
std::vector<std::vector<int>> unit_groups(const LayerParams& layers, const std::vector<at::Tensor>& params,
                                          int64_t threshold, std::vector<int>& layer_of_unit) {
  std::vector<std::vector<int>> groups;
  std::vector<int> persistent, owner(params.size(), -1);
  for (size_t l = 0; l < layers.own.size(); ++l) {
    std::vector<int> group;
    for (int i : layers.own[l]) {
      if (owner[i] >= 0) throw Error("ZeRO-3: parameter " + std::to_string(i) + " belongs to two layers");
      owner[i] = static_cast<int>(l);
      (params[i].numel() <= threshold ? persistent : group).push_back(i);
    }
    if (!group.empty()) {
      groups.push_back(std::move(group));
      layer_of_unit.push_back(static_cast<int>(l));
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (owner[i] < 0)  // a parameter outside every layer (registered on the stack itself): always gathered
      persistent.push_back(static_cast<int>(i));
  if (!persistent.empty()) {
    groups.push_back(persistent);
    layer_of_unit.push_back(-1);
  }
  return groups;
}

std::vector<ParamSpec> specs_of(const std::vector<at::Tensor>& params, const std::vector<std::string>& names) {
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < params.size(); ++i) specs.push_back(ParamSpec{names.at(i), params[i].sizes().vec(), params[i].numel()});
  return specs;
}

class Stage3 : public FlatStrategy, public LayerParamGatherer {
 public:
  Stage3(const ZeroOptions& o, FlatLayout layout, std::vector<at::Tensor> params, at::ScalarType dtype,
         std::shared_ptr<distributed::Communicator> dp)
      : FlatStrategy(o, std::move(layout), std::move(params), dtype, std::move(dp)) {}

  void init(const LayerParams& layers, const std::vector<int>& layer_of_unit) {
    const auto opts = at::TensorOptions().dtype(model_dtype_).device(device_);
    const auto& buckets = layout_.buckets();
    units_.resize(buckets.size());
    unit_of_param_.assign(params_.size(), -1);
    for (size_t u = 0; u < buckets.size(); ++u) {
      units_[u].persistent = layer_of_unit[u] < 0;
      for (int p : buckets[u].params) unit_of_param_[p] = static_cast<int>(u);
    }
    // Which units each layer needs: its own and those holding what it borrows.
    layer_units_.resize(layers.own.size());
    layer_numel_.assign(layers.own.size(), 0);
    for (size_t l = 0; l < layers.own.size(); ++l) {
      std::vector<int> needed;
      for (const auto* list : {&layers.own[l], &layers.borrowed[l]})
        for (int p : *list)
          if (!units_[unit_of_param_[p]].persistent) needed.push_back(unit_of_param_[p]);
      std::sort(needed.begin(), needed.end());
      needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
      for (int u : needed) layer_numel_[l] += buckets[u].numel;
      layer_units_[l] = std::move(needed);
    }
    // offload_param: the 16-bit shard lives on the host; gathers copy slices up first.
    shard_params_ = options_.offload_param ? host_empty(layout_.shard_numel(), model_dtype_)
                                           : at::empty({layout_.shard_numel()}, opts);
    empty_ = at::empty({0}, opts);
    // One unit at a time onto the device: rank 0's values (drawn there when the
    // model is a skeleton), this rank's slice.
    c10::AutoGradMode no_grad(false);
    for (size_t u = 0; u < buckets.size(); ++u) {
      at::Tensor full = at::zeros({buckets[u].numel}, opts);
      for (int p : buckets[u].params) {
        const ParamSlot& s = layout_.params()[p];
        if (!nn::is_unmaterialized(params_[p])) {
          full.narrow(0, s.offset - buckets[u].offset, s.numel).copy_(params_[p].detach().reshape(-1));
        } else if (!options_.initial_value) {
          throw Error("ZeRO-3: parameter '" + layout_.specs()[p].name + "' is not drawn yet (a skeleton's) and nothing "
                      "draws it");
        } else if (dp_->rank() == 0) {
          full.narrow(0, s.offset - buckets[u].offset, s.numel).copy_(options_.initial_value(p).reshape(-1));
        }
      }
      dp_->broadcast(full, 0)->wait();
      slice_of_shard(shard_params_, static_cast<int>(u)).copy_(full.narrow(0, rank_offset(u), slice_numel(u)));
      if (units_[u].persistent) {
        units_[u].full = full;
        units_[u].state = UnitState::gathered;
        bind(static_cast<int>(u));
      } else {
        for (int p : buckets[u].params) params_[p].set_data(empty_);
      }
    }
    options_.initial_value = nullptr;  // drawn: what it reads (the model) is not needed again
    // After the partition: start-up holds the model and the parameter shard, not the gradient shard too.
    // The shard accumulates the window's micro-steps: in the model's dtype,
    // or in fp32 with data_types.grad_accum_dtype "fp32".
    grad_shard_ = at::zeros({layout_.shard_numel()}, opts.dtype(options_.grad_accum_fp32 ? at::kFloat : model_dtype_));
    if (int u = persistent_unit(); u >= 0) {
      persistent_grads_ = at::zeros({buckets[u].numel}, opts);
      for (int p : buckets[u].params) {
        const ParamSlot& s = layout_.params()[p];
        params_[p].mutable_grad() =
            persistent_grads_.narrow(0, s.offset - buckets[u].offset, s.numel).view(layout_.specs()[p].shape);
      }
    }
    // fp32 training updates the shard itself when it sits where the optimizer
    // runs; otherwise an fp32 master (on the host with offload_optimizer).
    const bool same_place = options_.offload_optimizer == options_.offload_param;
    master_ = model_dtype_ == at::kFloat && same_place ? shard_params_ : make_master(shard_params_);
    // With both offloads the CPU Adam writes the 16-bit shard itself; with
    // neither, the device Adam does (device_params16).
    const bool optimizer_writes_shard =
        model_dtype_ != at::kFloat &&
        ((options_.offload_param && options_.offload_optimizer) ||
         (options_.device_params16 && !options_.offload_param && !options_.offload_optimizer));
    params16_ = optimizer_writes_shard ? shard_params_ : make_params16(layout_.shard_numel());
    segments_ = {OptimizerSegment{master_, grad_shard_, params16_}};
    install_hooks();
    register_weight_grad_sinks();
  }

  ~Stage3() override {
    // In-flight gathers must finish before their buffers go.
    for (auto& unit : units_)
      if (unit.gather) unit.gather->wait();
  }

  // --- ZeroStrategy ---------------------------------------------------------
  bool partitioned() const override { return true; }
  LayerParamGatherer* gatherer() override { return this; }
  // Stage 3 has no row-fed parameters (its embedding gradients are dense).
  std::pair<at::Tensor, int64_t> reduced_region(int b) const override { return {grad_dest(b), 0}; }

  void prepare_backward(bool boundary) override {
    armed_ = true;
    final_reductions_ = boundary;
    for (size_t u = 0; u < units_.size(); ++u) {
      units_[u].pending = static_cast<int>(layout_.buckets()[u].params.size());
      units_[u].reduced = false;
    }
  }

  void on_grad_ready(int index) override {
    const int u = unit_of_param_[index];
    if (!armed_ || units_[u].persistent) return;  // persistent gradients accumulate in place
    c10::AutoGradMode no_grad(false);
    Unit& unit = units_[u];
    // In the wire's dtype (fp32 for 16-bit training over several ranks): the
    // reduce-scatter reads it as is, with no widening pass per layer.
    if (!unit.staging.defined()) unit.staging = new_staging(u);
    stage_gradient(unit.staging, index, params_[index].grad());
    params_[index].mutable_grad().reset();
    if (--unit.pending == 0) {
      if (!options_.reduce_at_window_end) reduce_unit(u);  // else W still writes into the staging buffer
      release(u);
      unit.pending = static_cast<int>(layout_.buckets()[u].params.size());  // a reentrant second use counts again
    }
  }

  void finish_backward() override {
    c10::AutoGradMode no_grad(false);
    const bool reduce_staged = !options_.reduce_at_window_end || final_reductions_;
    for (size_t u = 0; u < units_.size(); ++u)
      if (reduce_staged && units_[u].staging.defined()) reduce_unit(static_cast<int>(u));
    if (int u = persistent_unit(); u >= 0) {
      launch_reduction(persistent_grads_, grad_dest(u), accumulating(u), /*scatter=*/true);
      units_[u].reduced = true;
    }
    wait_in_flight();
    if (persistent_grads_.defined()) persistent_grads_.zero_();
    release_all();
    first_micro_step_ = false;
    armed_ = false;
  }

  void wait_gradients() override {}

  void publish_params() override {
    c10::AutoGradMode no_grad(false);
    release_all();  // a unit kept from an eval forward would be stale
    const at::Tensor& updated = params16_.defined() ? params16_ : master_;
    if (!updated.is_same(shard_params_)) shard_params_.copy_(updated, /*non_blocking=*/true);
    if (int u = persistent_unit(); u >= 0) dp_->all_gather(units_[u].full, device_slice(u))->wait();
    if (fp8_) fp8_->take_scales(shard_params_, *dp_, device_);  // the new weights' FP8 scales
  }

  Float8GatherReport gather_in_float8(std::vector<Float8GatherGroup> groups) override {
    c10::AutoGradMode no_grad(false);
    release_all();
    std::vector<bool> persistent;
    for (const Unit& unit : units_) persistent.push_back(unit.persistent);
    fp8_ = std::make_unique<Float8UnitGather>(std::move(groups), layout_, persistent, dp_->rank());
    placeholders_.assign(params_.size(), at::Tensor());
    for (size_t u = 0; u < units_.size(); ++u) {
      if (!fp8_->in_fp8(static_cast<int>(u))) continue;
      // Shape only (what autograd checks a gradient against); NaN, so a read
      // of the values that FP8 gathering left out shows in the loss.
      for (int p : layout_.buckets()[u].params)
        placeholders_[p] = at::full({1}, std::numeric_limits<float>::quiet_NaN(),
                                    at::TensorOptions().dtype(model_dtype_).device(device_))
                               .expand(layout_.specs()[p].shape);
    }
    fp8_->take_scales(shard_params_, *dp_, device_);
    return fp8_->report();
  }

  void zero_gradients() override {
    forget_grad_norm();
    grad_shard_.zero_();
    if (persistent_grads_.defined()) persistent_grads_.zero_();
    first_micro_step_ = true;
  }

  std::vector<FlatPiece> owned_pieces() const override {
    return layout_.rank_pieces(dp_->rank(), /*segment_per_bucket=*/false);
  }

  ModelStateBytes bytes() const override {
    const int64_t persistent_full = persistent_unit() >= 0 ? units_[persistent_unit()].full.nbytes() : 0;
    const int64_t persistent_grads = persistent_grads_.defined() ? persistent_grads_.nbytes() : 0;
    return {static_cast<int64_t>(shard_params_.nbytes()) + persistent_full,  // host bytes with offload_param
            static_cast<int64_t>(grad_shard_.nbytes()) + persistent_grads,
            master_.is_same(shard_params_) ? 0 : static_cast<int64_t>(master_.nbytes())};
  }

  void for_each_full_param(const std::function<void(int, const at::Tensor&)>& fn) override {
    c10::AutoGradMode no_grad(false);
    for (size_t u = 0; u < units_.size(); ++u) {
      if (fp8_ && fp8_->in_fp8(static_cast<int>(u))) {
        // Gathered for the GEMMs as FP8 bytes: the values, in 16 bits, apart.
        at::Tensor full = at::empty({layout_.buckets()[u].numel}, at::TensorOptions().dtype(model_dtype_).device(device_));
        dp_->all_gather(full, device_slice(static_cast<int>(u)))->wait();
        for (int p : layout_.buckets()[u].params) {
          const ParamSlot& s = layout_.params()[p];
          fn(p, full.narrow(0, s.offset - layout_.buckets()[u].offset, s.numel).view(layout_.specs()[p].shape));
        }
        continue;
      }
      const bool was_released = units_[u].state == UnitState::released;
      ensure_gathered(static_cast<int>(u));
      for (int p : layout_.buckets()[u].params) fn(p, params_[p].detach());
      if (was_released) release(static_cast<int>(u));
    }
  }

  // --- LayerParamGatherer ----------------------------------------------------
  void before_forward(size_t layer) override {
    check_layer(layer);
    for (int u : layer_units_[layer]) ensure_gathered(u);
    int64_t budget = options_.prefetch_elems;
    for (size_t l = layer + 1; l < layer_units_.size() && budget > 0; ++l)
      for (int u : layer_units_[l]) prefetch(u, budget);
  }

  void after_forward(size_t layer, bool backward_follows) override {
    for (int u : layer_units_[layer])
      if (reuse_distance(layer, u, backward_follows) > options_.max_reuse_distance || live_ > options_.max_live_elems)
        release(u);
  }

  void before_backward(size_t layer) override {
    check_layer(layer);
    for (int u : layer_units_[layer]) ensure_gathered(u);
    int64_t budget = options_.prefetch_elems;
    for (size_t l = layer; l-- > 0 && budget > 0;)
      for (int u : layer_units_[l]) prefetch(u, budget);
  }

  int64_t live_elems() const override { return live_; }
  int64_t gathered_bytes() const override { return gathered_bytes_; }
  int64_t peak_live_elems() const override { return peak_live_; }

 private:
  int64_t slice_numel(size_t u) const { return layout_.buckets()[u].slice_numel(dp_->size()); }
  int64_t rank_offset(size_t u) const { return dp_->rank() * slice_numel(u); }
  at::Tensor slice_of_shard(const at::Tensor& shard, int u) const {
    return shard.narrow(0, layout_.buckets()[u].shard_offset, slice_numel(u));
  }
  // This rank's slice of unit u on the device (copied up from the host with offload_param).
  at::Tensor device_slice(int u) const {
    return slice_of_shard(shard_params_, u).to(device_, /*non_blocking=*/true);
  }
  int persistent_unit() const {
    return !units_.empty() && units_.back().persistent ? static_cast<int>(units_.size()) - 1 : -1;
  }
  at::Tensor grad_dest(int u) const { return slice_of_shard(grad_shard_, u); }
  bool accumulating(int u) const { return !first_micro_step_ || units_[u].reduced; }

  void check_layer(size_t layer) const {
    if (layer >= layer_units_.size())
      throw Error("ZeRO-3: layer " + std::to_string(layer) + " is not one of the " +
                  std::to_string(layer_units_.size()) + " layers the engine was initialized with");
  }

  // Elements gathered between this forward use of unit u (by `layer`) and its next use.
  int64_t reuse_distance(size_t layer, int u, bool backward_follows) const {
    int64_t between = 0;
    for (size_t l = layer + 1; l < layer_units_.size(); ++l) {
      if (std::find(layer_units_[l].begin(), layer_units_[l].end(), u) != layer_units_[l].end()) return between;
      between += layer_numel_[l];
    }
    // No later layer uses it: next is this layer's backward, after the rest's forward and backward.
    return backward_follows ? 2 * between : std::numeric_limits<int64_t>::max();
  }

  void launch_gather(int u) {
    Unit& unit = units_[u];
    c10::AutoGradMode no_grad(false);
    const auto on_device = at::TensorOptions().device(device_);
    if (fp8_ && fp8_->in_fp8(u)) {
      unit.full = at::empty({layout_.buckets()[u].numel}, on_device.dtype(at::kByte));
      unit.gather = dp_->all_gather(unit.full, fp8_->cast_slice(u, device_slice(u)));
    } else {
      unit.full = at::empty({layout_.buckets()[u].numel}, on_device.dtype(model_dtype_));
      unit.gather = dp_->all_gather(unit.full, device_slice(u));
    }
    gathered_bytes_ += unit.full.nbytes();
    unit.state = UnitState::in_flight;
    live_ += layout_.buckets()[u].numel;
    peak_live_ = std::max(peak_live_, live_);
  }

  // DeepSpeed's rule: units are prefetched while those started so far stay
  // under the budget, so the unit that crosses it is still fetched (with the
  // default 5e7 and a 50.3M-element gpt2-1.3b layer, "must fit" prefetched
  // nothing and every gather was exposed). The live cap stays a hard limit.
  void prefetch(int u, int64_t& budget) {
    const int64_t n = layout_.buckets()[u].numel;
    if (budget <= 0 || units_[u].state != UnitState::released) return;
    if (live_ + n > options_.max_live_elems) {
      budget = 0;
      return;
    }
    budget -= n;
    launch_gather(u);
  }

  void ensure_gathered(int u) {
    Unit& unit = units_[u];
    if (unit.state == UnitState::gathered) return;
    if (unit.state == UnitState::released) launch_gather(u);
    unit.gather->wait();
    unit.gather.reset();
    unit.state = UnitState::gathered;
    bind(u);
  }

  void bind(int u) {
    const BucketSpan& b = layout_.buckets()[u];
    if (fp8_ && fp8_->in_fp8(u)) {
      for (int p : b.params) params_[p].set_data(placeholders_[p]);
      fp8_->bind(u, units_[u].full);
      return;
    }
    for (int p : b.params) {
      const ParamSlot& s = layout_.params()[p];
      params_[p].set_data(units_[u].full.narrow(0, s.offset - b.offset, s.numel).view(layout_.specs()[p].shape));
    }
  }

  void release(int u) {
    Unit& unit = units_[u];
    if (unit.persistent || unit.state == UnitState::released) return;
    if (unit.gather) unit.gather->wait();  // the buffer is the collective's until then
    unit.gather.reset();
    for (int p : layout_.buckets()[u].params) params_[p].set_data(empty_);
    if (fp8_) fp8_->unbind(u);
    unit.full = at::Tensor();
    unit.state = UnitState::released;
    live_ -= layout_.buckets()[u].numel;
  }

  void release_all() {
    for (size_t u = 0; u < units_.size(); ++u) release(static_cast<int>(u));
  }

  // The parameter's range of its unit's staging buffer (reduce-scattered when
  // the unit's gradients are all in); persistent units keep autograd's path
  // (their gradients accumulate in place).
  at::Tensor fused_destination(int index, bool* accumulate) override {
    const int u = unit_of_param_[index];
    Unit& unit = units_[u];
    if (!armed_ || unit.persistent) return at::Tensor();
    if (!unit.staging.defined()) unit.staging = new_staging(u);  // first: a new buffer resets staged_
    *accumulate = staged_[index] || fused_[index];
    return staging_slot(unit.staging, index).view(layout_.specs()[index].shape);
  }

  void reduce_unit(int u) {
    Unit& unit = units_[u];
    at::Tensor staging = unit.staging;
    zero_unstaged(staging, u);
    unit.staging = at::Tensor();  // owned by the reduction until it completes
    launch_reduction(staging, grad_dest(u), accumulating(u), /*scatter=*/true);
    unit.reduced = true;
    wait_in_flight(kMaxReductionsInFlight);
  }

  std::vector<Unit> units_;
  std::vector<int> unit_of_param_;
  std::vector<std::vector<int>> layer_units_;  // non-persistent units each layer needs
  std::vector<int64_t> layer_numel_;
  at::Tensor shard_params_, grad_shard_, master_, params16_, persistent_grads_, empty_;
  int64_t live_ = 0, peak_live_ = 0, gathered_bytes_ = 0;
  bool first_micro_step_ = true;
  std::unique_ptr<Float8UnitGather> fp8_;  // gather_in_float8's
  std::vector<at::Tensor> placeholders_;   // per parameter of a unit in FP8: its shape, no values
};

}  // namespace

std::unique_ptr<ZeroStrategy> make_stage3(const ZeroOptions& options, const LayerParams& layers,
                                          std::vector<at::Tensor> params, std::vector<std::string> names,
                                          at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp,
                                          c10::Device device) {
  if (params.empty()) throw Error("ZeRO: the model has no trainable parameters (none with requires_grad)");
  if (layers.own.size() != layers.borrowed.size()) throw Error("ZeRO-3: own/borrowed lists differ in length");
  std::vector<int> layer_of_unit;
  const auto groups = unit_groups(layers, params, options.persistence_threshold, layer_of_unit);
  FlatLayout layout = FlatLayout::build_groups(specs_of(params, names), groups, dp->size());
  ZeroOptions o = options;
  o.device = device;
  auto s = std::make_unique<Stage3>(o, std::move(layout), std::move(params), model_dtype, std::move(dp));
  s->init(layers, layer_of_unit);
  return s;
}

}  // namespace stratum::zero
