#include "stratum/zero/flat_strategy.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "stratum/core/error.h"
#include "stratum/core/log.h"
#ifdef STRATUM_WITH_CUDA_KERNELS
#include "stratum/nn/kernel_launch.h"
#include "stratum/zero/row_scatter_cuda.h"
#include "stratum/zero/wire_cast_cuda.h"
#endif

namespace stratum::zero {
namespace {

// dst = src for a gradient written into its slot. Over several ranks the
// slots are fp32 and autograd's gradients 16-bit: a vectorized kernel widens
// them (ATen's dtype-converting copy moves one element per access).
void write_gradient(const at::Tensor& dst, const at::Tensor& src) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  const at::ScalarType from = src.scalar_type();
  if (dst.scalar_type() == at::kFloat && (from == at::kBFloat16 || from == at::kHalf) && dst.is_cuda() &&
      src.device() == dst.device() && dst.is_contiguous() && src.is_contiguous() && dst.numel() == src.numel()) {
    stratum::cuda::check_launch(cuda::launch_widen_to_float(src.const_data_ptr(), nn::cuda::dtype_of(src),
                                                            dst.data_ptr<float>(), src.numel(),
                                                            nn::cuda::current_stream()),
                                "ZeRO: widening a gradient to fp32");
    return;
  }
#endif
  dst.copy_(src);
}

// Tells the strategy that autograd finished accumulating one parameter's gradient.
class GradReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  GradReadyHook(FlatStrategy* owner, int index) : owner_(owner), index_(index) {}
  void operator()(const torch::autograd::Variable&) override {
    owner_->mark_reached(index_);
    owner_->on_grad_ready(index_);
  }

 private:
  FlatStrategy* owner_;
  int index_;
};

std::vector<ParamSpec> specs_of(const std::vector<at::Tensor>& params, const std::vector<std::string>& names) {
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < params.size(); ++i)
    specs.push_back(ParamSpec{i < names.size() ? names[i] : "param" + std::to_string(i), params[i].sizes().vec(),
                              params[i].numel()});
  return specs;
}

}  // namespace

FlatStrategy::FlatStrategy(const ZeroOptions& options, FlatLayout layout, std::vector<at::Tensor> params,
                           at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp)
    : options_(options),
      layout_(std::move(layout)),
      params_(std::move(params)),
      model_dtype_(model_dtype),
      // One rank has no wire: its gradients stay in the model's dtype.
      grad_dtype_(options.grad_accum_fp32 ? at::kFloat
                  : dp->size() > 1        ? at::promote_types(model_dtype, options.comm_dtype)
                                          : model_dtype),
      dp_(std::move(dp)),
      device_(options.device) {
  const double n = dp_->size();
  pre_scale_ = options_.prescale_gradients ? 1.0 / n : 1.0 / options_.gradient_predivide_factor;
  post_scale_ = options_.prescale_gradients ? 1.0 : options_.gradient_predivide_factor / n;
  average_on_wire_ = !options_.prescale_gradients && options_.gradient_predivide_factor == 1.0 &&
                     at::isFloatingType(options_.comm_dtype);
  pending_.assign(layout_.buckets().size(), 0);
  launched_.assign(layout_.buckets().size(), false);
  staged_.assign(params_.size(), false);
}

FlatStrategy::FlatStrategy(const ZeroOptions& options, std::vector<at::Tensor> params, std::vector<std::string> names,
                           at::ScalarType model_dtype, std::shared_ptr<distributed::Communicator> dp)
    // Copies, not moves: the order in which arguments are evaluated is unspecified.
    : FlatStrategy(options,
                   FlatLayout::build(specs_of(params, names), options.bucket_elems, dp->size(),
                                     dp->size() > 1 ? options.row_gradient_params : std::vector<int>{}),
                   params,
                   model_dtype, dp) {
  const c10::Device device = params_.front().device();
  device_ = device;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].device() != device)
      throw Error("ZeRO: parameter '" + layout_.specs()[i].name + "' is on " + params_[i].device().str() +
                  " but the first is on " + device.str() + "; move the model first");
  // Parameters become views into one buffer; set_data keeps each tensor's identity.
  flat_params_ = at::zeros({layout_.total_numel()}, at::TensorOptions().dtype(model_dtype_).device(device));
  {
    c10::AutoGradMode no_grad(false);
    for (size_t i = 0; i < params_.size(); ++i) {
      const ParamSlot& s = layout_.params()[i];
      at::Tensor view = flat_params_.narrow(0, s.offset, s.numel).view(params_[i].sizes());
      view.copy_(params_[i].detach());
      params_[i].set_data(view);
    }
  }
  // Every rank starts from rank 0's weights.
  dp_->broadcast(flat_params_, 0)->wait();
}

FlatStrategy::~FlatStrategy() {
  for (auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  for (size_t i = 0; i < params_.size(); ++i)
    if (!row_fed_.empty() && row_fed_[i]) nn::unregister_row_gradient_sink(params_[i], this);
  for (const auto& [impl, i] : sink_index_) nn::unregister_weight_grad_sink(params_[i], this);
  // Lazy gathers of the last step: the model outlives the strategy and must see them.
  try {
    wait_params();
  } catch (const std::exception& e) {
    log::warn(std::string("ZeRO: the last parameter all-gather failed: ") + e.what());
  }
}

void FlatStrategy::for_each_full_param(const std::function<void(int, const at::Tensor&)>& fn) {
  wait_params();
  for (size_t i = 0; i < params_.size(); ++i) fn(static_cast<int>(i), params_[i].detach());
}

std::vector<std::string> FlatStrategy::parameters_without_gradient() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < reached_.size(); ++i)
    if (!reached_[i]) out.push_back(layout_.specs()[i].name);
  return out;
}

void FlatStrategy::install_hooks() {
  reached_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<GradReadyHook>(this, static_cast<int>(i)));
  if (dp_->size() == 1 || options_.row_gradient_params.empty() || options_.stage == 3) return;
  row_fed_.assign(params_.size(), 0);
  row_bucket_.assign(layout_.buckets().size(), 0);
  const auto& dense = options_.row_dense_params;
  for (int p : options_.row_gradient_params) {
    const char kind = std::find(dense.begin(), dense.end(), p) != dense.end() ? kRowAndDense : kRowOnly;
    row_fed_.at(p) = kind;
    row_bucket_.at(layout_.params()[p].bucket) = kind;
    nn::register_row_gradient_sink(params_[p], this);
  }
}

void FlatStrategy::register_weight_grad_sinks() {
  fused_.assign(params_.size(), 0);
  if (!options_.fuse_weight_grads) return;
  for (int i : options_.fused_params) {
    sink_index_.emplace(params_[i].unsafeGetTensorImpl(), i);
    nn::register_weight_grad_sink(params_[i], this);
  }
}

at::Tensor FlatStrategy::weight_grad_destination(const at::Tensor& weight, bool* accumulate) {
  auto it = sink_index_.find(weight.unsafeGetTensorImpl());
  return it == sink_index_.end() ? at::Tensor() : fused_destination(it->second, accumulate);
}

void FlatStrategy::weight_grad_written(const at::Tensor& weight) {
  auto it = sink_index_.find(weight.unsafeGetTensorImpl());
  if (it != sink_index_.end()) fused_[it->second] = 1;
}

void FlatStrategy::reset_pending() {
  const auto& buckets = layout_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    pending_[b] = static_cast<int>(buckets[b].params.size());
    launched_[b] = false;
  }
  std::fill(fused_.begin(), fused_.end(), 0);
}

bool FlatStrategy::count_ready(int index) {
  const int b = layout_.params()[index].bucket;
  return --pending_[b] == 0;
}

at::Tensor FlatStrategy::slice_of(const at::Tensor& flat, int b) const {
  const BucketSpan& s = layout_.buckets()[b];
  return flat.narrow(0, layout_.slice_offset(b, dp_->rank()), s.slice_numel(dp_->size()));
}

at::Tensor FlatStrategy::bucket_of(const at::Tensor& flat, int b) const {
  const BucketSpan& s = layout_.buckets()[b];
  return flat.narrow(0, s.offset, s.numel);
}

void FlatStrategy::launch_reduction(const at::Tensor& grads, at::Tensor dest, bool accumulate, bool scatter) {
  c10::AutoGradMode no_grad(false);
  const int n = dp_->size();
  if (n == 1) {
    // One rank: the reduction is the identity (the scalings multiply to 1/n =
    // 1), so neither the widened wire copy nor the collective is needed.
    if (accumulate) dest.add_(grads);
    else if (dest.data_ptr() != grads.data_ptr() || dest.scalar_type() != grads.scalar_type()) dest.copy_(grads);
    return;
  }
  // The wire copy: a wider dtype (fp32 for 16-bit training), or the bucket itself.
  at::Tensor wire = grads.scalar_type() == options_.comm_dtype ? grads : grads.to(options_.comm_dtype);
  if (!average_on_wire_ && pre_scale_ != 1.0) wire.mul_(pre_scale_);
  const distributed::ReduceOp op = average_on_wire_ ? distributed::ReduceOp::avg : distributed::ReduceOp::sum;
  if (scatter && options_.reduce_scatter) {
    const bool into_dest = !accumulate && dest.scalar_type() == wire.scalar_type() && dest.is_contiguous();
    at::Tensor out = into_dest ? dest : at::empty({grads.numel() / n}, wire.options());
    auto work = dp_->reduce_scatter(out, wire, op);
    in_flight_.push_back(InFlight{work, out, dest, accumulate, wire});
  } else {
    auto work = dp_->all_reduce(wire, op);
    at::Tensor result = scatter ? wire.narrow(0, dp_->rank() * (grads.numel() / n), grads.numel() / n) : wire;
    in_flight_.push_back(InFlight{work, result, dest, accumulate, wire});
  }
  // The collective's output is the window's gradient as it lands (no scaling,
  // copy or add after it): its norm can start when the collective ends.
  const InFlight& f = in_flight_.back();
  const bool in_place = average_on_wire_ && !accumulate && f.wire.data_ptr() == dest.data_ptr() &&
                        f.wire.numel() == dest.numel() && f.wire.scalar_type() == dest.scalar_type();
  note_final_gradient(in_place ? f.work : nullptr, dest, in_place);
}

void FlatStrategy::note_final_gradient(const distributed::WorkPtr& work, const at::Tensor& dest, bool in_place) {
  if (!final_reductions_) return;
  if (!grad_norm_) grad_norm_ = std::make_unique<ReducedGradNorm>(device_, layout_.buckets().size());
  if (in_place) grad_norm_->add(work, dest);
  else grad_norm_->invalidate();
}

at::Tensor FlatStrategy::reduced_grad_sq_norm() {
  if (!grad_norm_) return at::Tensor();
  int64_t numel = 0;
  for (const OptimizerSegment& s : segments_) numel += s.grad.numel();
  return grad_norm_->take(numel);
}

void FlatStrategy::forget_grad_norm() {
  if (grad_norm_) grad_norm_->reset();
  taken_rows_.clear();
}

void FlatStrategy::take_rows(const at::Tensor& weight, const at::Tensor& ids, const at::Tensor& grad_rows) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (!row_fed_.empty() && row_fed_[i] && params_[i].unsafeGetTensorImpl() == weight.unsafeGetTensorImpl()) {
      taken_rows_.push_back(TakenRows{static_cast<int>(i), ids, grad_rows.detach()});
      mark_reached(static_cast<int>(i));
      return;
    }
  throw Error("ZeRO: an embedding's row gradients reached a strategy that does not own the weight");
}

void FlatStrategy::add_tied_rows() {
  bool waited = false;
  for (size_t b = 0; b < row_bucket_.size(); ++b) {
    if (row_bucket_[b] != kRowAndDense) continue;
    if (!waited) wait_in_flight();  // stream-ordered: the reduced head part first
    waited = true;
    auto [dest, offset] = reduced_region(static_cast<int>(b));
    exchange_rows(static_cast<int>(b), dest, offset, /*add=*/true);
  }
}

void FlatStrategy::exchange_rows(int b, const at::Tensor& dest, int64_t dest_offset, bool add) {
  c10::AutoGradMode no_grad(false);
  const BucketSpan& span = layout_.buckets()[b];
  const int p = span.params.front();  // a row bucket holds one parameter
  const ParamSpec& spec = layout_.specs()[p];
  const int64_t vocab = spec.shape.at(0), hidden = spec.shape.at(1);
  std::vector<at::Tensor> ids, rows;
  for (const TakenRows& t : taken_rows_)
    if (t.param == p) ids.push_back(t.ids), rows.push_back(t.rows.reshape({-1, hidden}));
  const at::TensorOptions on_device = at::TensorOptions().device(device_);
  at::Tensor my_ids = ids.empty() ? at::empty({0}, on_device.dtype(at::kLong)) : at::cat(ids);
  at::Tensor my_rows = rows.empty() ? at::empty({0, hidden}, on_device.dtype(model_dtype_)) : at::cat(rows);
  // Counts first: ranks may hold different numbers of rows (the host reads
  // the largest, so every rank sends buffers of one size).
  const int n = dp_->size();
  at::Tensor count = at::full({1}, my_ids.numel(), on_device.dtype(at::kLong));
  at::Tensor counts = at::empty({n}, count.options());
  dp_->all_gather(counts, count)->wait();
  const int64_t most = counts.max().item<int64_t>();
  at::Tensor send_ids = at::zeros({most}, my_ids.options());
  at::Tensor send_rows = at::zeros({most, hidden}, my_rows.options());  // zero rows: padding adds nothing
  send_ids.narrow(0, 0, my_ids.numel()).copy_(my_ids);
  send_rows.narrow(0, 0, my_rows.size(0)).copy_(my_rows);
  at::Tensor all_ids = at::empty({n * most}, send_ids.options());
  at::Tensor all_rows = at::empty({n * most * hidden}, send_rows.options());
  auto ids_work = dp_->all_gather(all_ids, send_ids);
  auto rows_work = dp_->all_gather(all_rows, send_rows.reshape({-1}));
  ids_work->wait();
  rows_work->wait();
  // dest covers [dest_offset, +numel) of the bucket: the parameter's elements, then zero padding.
  const int64_t begin = std::min(dest_offset, spec.numel), end = std::min(dest_offset + dest.numel(), spec.numel);
  if (!add) dest.zero_();
  add_mean_of_rows(all_ids, all_rows.view({n * most, hidden}), vocab, dest, begin, end);
  if (add) {
    // Its norm, queued when the head part landed, is taken again from the sum.
    if (final_reductions_ && grad_norm_) grad_norm_->renorm(dest);
  } else {
    note_final_gradient(nullptr, dest, /*in_place=*/true);  // final on the current stream now
  }
  taken_rows_.erase(std::remove_if(taken_rows_.begin(), taken_rows_.end(), [p](const TakenRows& t) { return t.param == p; }),
                    taken_rows_.end());
}

void FlatStrategy::add_mean_of_rows(const at::Tensor& ids, const at::Tensor& rows, int64_t vocab, const at::Tensor& dest,
                                    int64_t begin, int64_t end) const {
  const double scale = 1.0 / dp_->size();
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (dest.is_cuda() && dest.scalar_type() == at::kFloat && dest.is_contiguous()) {
    const auto [sorted, order] = at::sort(ids, /*stable=*/true, /*dim=*/0, /*descending=*/false);
    const at::ScalarType t = rows.scalar_type();
    const at::Tensor r = t == at::kBFloat16 || t == at::kHalf ? rows.contiguous() : rows.to(at::kFloat).contiguous();
    stratum::cuda::check_launch(
        cuda::launch_add_sorted_rows(sorted.const_data_ptr<int64_t>(), order.const_data_ptr<int64_t>(), sorted.numel(),
                                     r.const_data_ptr(), nn::cuda::dtype_of(r), rows.size(1), static_cast<float>(scale),
                                     dest.data_ptr<float>(), begin, end, nn::cuda::current_stream()),
        "ZeRO: adding an embedding's exchanged rows");
    return;
  }
#endif
  // Elsewhere ATen's dense gradient (deterministic), summed in the wire's dtype.
  if (end <= begin) return;
  const at::Tensor dense = at::embedding_dense_backward(rows.to(dest.scalar_type()), ids, vocab, /*padding_idx=*/-1,
                                                        /*scale_grad_by_freq=*/false)
                               .reshape({-1});
  dest.narrow(0, 0, end - begin).add_(dense.narrow(0, begin, end - begin), scale);
}

void FlatStrategy::wait_in_flight(size_t keep) {
  c10::AutoGradMode no_grad(false);
  while (in_flight_.size() > keep) {
    InFlight& f = in_flight_.front();
    f.work->wait();
    if (!average_on_wire_ && post_scale_ != 1.0) f.wire.mul_(post_scale_);
    if (f.accumulate) f.dest.add_(f.wire);
    else if (f.wire.data_ptr() != f.dest.data_ptr()) f.dest.copy_(f.wire);
    in_flight_.pop_front();
  }
}

at::Tensor FlatStrategy::new_staging(int b) {
  const BucketSpan& s = layout_.buckets()[b];
  for (int p : s.params) staged_[p] = false;
  return at::empty({s.numel}, at::TensorOptions().dtype(grad_dtype_).device(device_));
}

at::Tensor FlatStrategy::staging_slot(const at::Tensor& staging, int index) const {
  const ParamSlot& slot = layout_.params()[index];
  return staging.narrow(0, slot.offset - layout_.buckets()[slot.bucket].offset, slot.numel);
}

void FlatStrategy::stage_gradient(const at::Tensor& staging, int index, const at::Tensor& grad) {
  if (fused_[index]) {  // the GEMM wrote the slot already; grad is its unread stand-in
    fused_[index] = 0;
    staged_[index] = true;
    return;
  }
  c10::AutoGradMode no_grad(false);
  at::Tensor mine = staging_slot(staging, index);
  if (staged_[index]) mine.add_(grad.reshape(-1));
  else write_gradient(mine, grad.reshape(-1));
  staged_[index] = true;
}

void FlatStrategy::zero_unstaged(const at::Tensor& staging, int b) const {
  c10::AutoGradMode no_grad(false);
  const BucketSpan& s = layout_.buckets()[b];
  if (s.numel > s.used) staging.narrow(0, s.used, s.numel - s.used).zero_();
  for (int p : s.params)
    if (!staged_[p]) staging.narrow(0, layout_.params()[p].offset - s.offset, layout_.params()[p].numel).zero_();
}

at::Tensor FlatStrategy::host_empty(int64_t numel, at::ScalarType dtype) const {
  const bool pin = options_.pin_memory && device_.is_cuda();
  return at::empty({numel}, at::TensorOptions().dtype(dtype).device(at::kCPU).pinned_memory(pin));
}

at::Tensor FlatStrategy::make_master(const at::Tensor& values) const {
  // Without offload the master sits with the model (values may be a host shard: offload_param).
  if (!options_.offload_optimizer) return values.to(device_, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  // Only what crosses to the device is pinned: with 16-bit training that is
  // params16, not the masters (pinning tens of GB costs minutes).
  at::Tensor master = model_dtype_ == at::kFloat
                          ? host_empty(values.numel(), at::kFloat)
                          : at::empty({values.numel()}, at::TensorOptions().dtype(at::kFloat));
  master.copy_(values);
  return master;
}

at::Tensor FlatStrategy::make_params16(int64_t numel) const {
  if (!options_.offload_optimizer || model_dtype_ == at::kFloat) return at::Tensor();
  return host_empty(numel, model_dtype_);
}

at::Tensor FlatStrategy::make_shard_master() const {
  at::Tensor shard = at::empty({layout_.shard_numel()}, flat_params_.options());
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    const BucketSpan& s = layout_.buckets()[b];
    shard.narrow(0, s.shard_offset, s.slice_numel(dp_->size())).copy_(slice_of(flat_params_, static_cast<int>(b)));
  }
  return make_master(shard);
}

void FlatStrategy::make_bucket_segments(const at::Tensor& master, const at::Tensor& grad_shard,
                                        const at::Tensor& host_params16, const LayerParams* layers) {
  const bool device16 = options_.device_params16 && !host_params16.defined() && model_dtype_ != at::kFloat;
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    const BucketSpan& s = layout_.buckets()[b];
    auto piece = [&](const at::Tensor& t) {
      return t.defined() ? t.narrow(0, s.shard_offset, s.slice_numel(dp_->size())) : t;
    };
    // The device Adam rounds into the model's own slice: the all-gather then runs in place.
    at::Tensor params16 = device16 ? slice_of(flat_params_, static_cast<int>(b)) : piece(host_params16);
    segments_.push_back(OptimizerSegment{piece(master), piece(grad_shard), params16});
  }
  param_gather_ = std::make_unique<BucketParamGather>(layout_, flat_params_, dp_);
  if (options_.overlap_param_gather && layers) param_gather_->wait_by_layer(*layers);
}

void FlatStrategy::segment_updated(size_t segment) {
  if (!param_gather_) return;
  const OptimizerSegment& seg = segments_.at(segment);
  param_gather_->start(static_cast<int>(segment), seg.params16.defined() ? seg.params16 : seg.master);
}

void FlatStrategy::publish_bucket_params() {
  // Last bucket first: it holds the first layers, which the next forward reads first.
  for (int b = static_cast<int>(segments_.size()) - 1; b >= 0; --b)
    if (!param_gather_->started(b)) segment_updated(static_cast<size_t>(b));
  param_gather_->end_round();
  if (!param_gather_->lazy()) param_gather_->wait_all();
}

void FlatStrategy::wait_params() {
  if (param_gather_) param_gather_->wait_all();
}

LayerParamGatherer* FlatStrategy::gatherer() {
  return param_gather_ && param_gather_->lazy() ? param_gather_.get() : nullptr;
}

void BoundaryReducedStrategy::init_flat_grads() {
  flat_grads_ = at::zeros({flat_params_.numel()}, flat_params_.options().dtype(grad_dtype_));
  written_.assign(params_.size(), false);
  zero_gradients();
  register_weight_grad_sinks();
}

at::Tensor BoundaryReducedStrategy::fused_destination(int index, bool* accumulate) {
  *accumulate = written_[index] || fused_[index];
  return grad_slot(index);
}

at::Tensor BoundaryReducedStrategy::grad_slot(int index) const {
  const ParamSlot& s = layout_.params()[index];
  return flat_grads_.narrow(0, s.offset, s.numel).view(params_[index].sizes());
}

void BoundaryReducedStrategy::prepare_backward(bool boundary) {
  armed_ = boundary;
  final_reductions_ = boundary;
  reset_pending();
}

void BoundaryReducedStrategy::on_grad_ready(int index) {
  if (row_only(index)) return;  // its gradient comes as rows (take_rows)
  {
    c10::AutoGradMode no_grad(false);
    at::Tensor& p = params_[index];
    at::Tensor slot = grad_slot(index);
    // Written once per window, then added to (also when autograd reaches a
    // parameter twice in one backward, e.g. from two checkpointed layers).
    // Fused: the GEMM wrote the slot; .grad is its uninitialized stand-in.
    if (fused_[index]) fused_[index] = 0;
    else if (written_[index]) slot.add_(p.grad());
    else write_gradient(slot, p.grad());
    written_[index] = true;
    p.mutable_grad().reset();
  }
  if (!armed_ || !count_ready(index) || !options_.overlap_comm) return;
  launch(layout_.params()[index].bucket);
}

void BoundaryReducedStrategy::finish_backward() {
  if (fresh_window_) {
    // A parameter backward did not reach has a zero gradient this window.
    c10::AutoGradMode no_grad(false);
    for (size_t i = 0; i < params_.size(); ++i)
      if (!written_[i] && !row_only(static_cast<int>(i))) {  // row-only: written by the exchange
        grad_slot(static_cast<int>(i)).zero_();
        written_[i] = true;
      }
    fresh_window_ = false;
  }
  if (!armed_) return;
  for (size_t b = 0; b < launched_.size(); ++b)
    if (!launched_[b]) launch(static_cast<int>(b));
  add_tied_rows();
}

void BoundaryReducedStrategy::zero_gradients() {
  forget_grad_norm();
  std::fill(written_.begin(), written_.end(), false);
  fresh_window_ = true;
}

}  // namespace stratum::zero
