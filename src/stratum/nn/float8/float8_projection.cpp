#include "stratum/nn/float8/float8_projection.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "stratum/core/error.h"

namespace stratum::nn::float8 {

Recipe tensorwise_recipe() {
  return Recipe{Scaling::tensorwise, Scaling::tensorwise, Format::e4m3, Format::e5m2, false};
}

Recipe rowwise_recipe() { return Recipe{Scaling::rowwise, Scaling::rowwise, Format::e4m3, Format::e4m3, true}; }

Recipe blockwise_recipe() {
  return Recipe{Scaling::blocks_1x128, Scaling::blocks_128x128, Format::e4m3, Format::e4m3, false};
}

const char* recipe_name(const Recipe& r) {
  return r.scaling == Scaling::rowwise ? "rowwise" : is_blockwise(r.scaling) ? "blockwise" : "tensorwise";
}

const char* operand_name(Operand o) {
  switch (o) {
    case Operand::input: return "the input x";
    case Operand::weight: return "the weight W";
    case Operand::grad_output: return "the output gradient dy";
  }
  return "?";
}

int split_dim(SplitAxis axis, Operand o) {
  switch (axis) {
    case SplitAxis::none: return -1;
    case SplitAxis::output:  // N: W [N, K]'s rows, dy [M, N]'s columns; x is whole
      return o == Operand::weight ? 0 : o == Operand::grad_output ? 1 : -1;
    case SplitAxis::contraction:  // K: x [M, K]'s and W [N, K]'s columns; dy is whole
      return o == Operand::grad_output ? -1 : 1;
  }
  return -1;
}

namespace {
std::string nonfinite_text(Operand o, const std::string& layer, bool nan) {
  return std::string("fp8: ") + operand_name(o) + " of layer " + layer + " holds " + (nan ? "NaN" : "Inf or NaN") +
         " (its amax is not finite, so no FP8 scale exists); the values went bad before this GEMM";
}
}  // namespace

void record_amax(const at::Tensor& amax, Operand o, const at::Tensor& flags, const std::string& layer) {
  if (!amax.is_cuda()) {
    // On the host the values are at hand: name the layer now.
    if (!at::isfinite(amax).all().item<bool>()) throw Error(nonfinite_text(o, layer, at::isnan(amax).any().item<bool>()));
    return;
  }
  const int64_t i = static_cast<int64_t>(o);
  flags.narrow(0, i, 1).logical_or_(at::logical_not(at::isfinite(amax)).any().view({1}));
}

Float8Projection::Float8Projection(std::string name, Recipe recipe, std::shared_ptr<WeightCache> cache)
    : name_(std::move(name)), recipe_(recipe), cache_(std::move(cache)) {
  if (!cache_) throw Error("fp8: projection " + name_ + " made without a weight cache");
  cache_->add(this);
}

Float8Projection::~Float8Projection() { cache_->remove(this); }

Float8Pair Float8Projection::weight(const std::vector<at::Tensor>& weights) {
  if (weights.empty()) throw Error("fp8: projection " + name_ + " given no weights");
  if (gathered_ && gathered_->w.data.defined()) {
    // Gathered in FP8 (ZeRO-3): the bytes are W, cast with the scale its
    // weights' amax over every rank gives.
    if (!nonfinite_.defined() || nonfinite_.device() != gathered_->w.data.device())
      nonfinite_ = at::zeros({3}, gathered_->w.scale_inv.options().dtype(at::kBool));
    record_amax(gathered_->w.amax, Operand::weight);
    return {gathered_->w, {}};
  }
  const bool hold = cache_->holds_weights();
  std::vector<std::pair<int64_t, const void*>> now;
  for (const at::Tensor& w : weights) now.emplace_back(w._version(), w.storage().data());
  if (hold && generation_ == cache_->generation() && now == versions_ && weight_.rows.data.defined()) return weight_;
  c10::AutoGradMode no_grad(false);
  const at::Tensor stacked = weights.size() == 1 ? weights.front() : at::cat(weights, 0);
  Float8Pair w8 = cast_shard(stacked, recipe_.weight(), /*with_transposed=*/hold,
                             split_dim(split_axis_, Operand::weight), max_over_group_);
  if (!nonfinite_.defined() || nonfinite_.device() != stacked.device())
    nonfinite_ = at::zeros({3}, stacked.options().dtype(at::kBool));
  record_amax(w8.rows.amax, Operand::weight);
  cache_->count_cast();
  if (!hold) return w8;
  weight_ = std::move(w8);
  generation_ = cache_->generation();
  versions_ = std::move(now);
  return weight_;
}

void Float8Projection::share_amax(SplitAxis axis, AmaxReducer max_over_group) {
  if (axis != SplitAxis::none && !max_over_group)
    throw Error("fp8: projection " + name_ + " is split over a group but given no amax reduction");
  split_axis_ = axis;
  max_over_group_ = std::move(max_over_group);
  weight_ = {};
}

void Float8Projection::record_amax(const at::Tensor& amax, Operand o) {
  float8::record_amax(amax, o, nonfinite_, name_);
}

std::string Float8Projection::nonfinite_message(const at::Tensor& flags_on_host) const {
  for (Operand o : {Operand::weight, Operand::input, Operand::grad_output})
    if (flags_on_host[static_cast<int64_t>(o)].item<bool>()) return nonfinite_text(o, name_, false);
  return "";
}

void Float8Projection::clear_nonfinite() {
  if (nonfinite_.defined()) nonfinite_.zero_();
}

}  // namespace stratum::nn::float8
