#include "stratum/optim/lamb.h"

#include <string>

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include "stratum/core/error.h"

namespace stratum::optim {
namespace {

std::string describe(const at::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  return std::string(c10::toString(t.scalar_type())) + " of " + std::to_string(t.numel()) + " elements on " +
         t.device().str();
}

// A flat tensor of the segment's size on the params' device, of one of `dtypes`.
void check_flat(const char* fn, const char* what, const at::Tensor& t, const at::Tensor& params,
                std::initializer_list<at::ScalarType> dtypes) {
  bool dtype_ok = false;
  for (auto d : dtypes) dtype_ok = dtype_ok || (t.defined() && t.scalar_type() == d);
  if (!t.defined() || !dtype_ok || t.dim() != 1 || t.numel() != params.numel() || t.device() != params.device())
    throw Error(std::string(fn) + ": " + what + " must be a 1-d tensor of " + std::to_string(params.numel()) +
                " elements on " + params.device().str() + " (" +
                (dtypes.size() == 1 ? c10::toString(*dtypes.begin()) : "fp32, bf16 or fp16") + "), got " + describe(t));
}

void check_scalar(const char* fn, const char* what, const at::Tensor& t, const at::Tensor& params) {
  if (!t.defined() || t.numel() != 1 || t.scalar_type() != at::kFloat || t.device() != params.device())
    throw Error(std::string(fn) + ": " + what + " must be a 1-element fp32 tensor on " + params.device().str() +
                ", got " + describe(t));
}

void check_common(const char* fn, const at::Tensor& params, const AdamState& state, const LambRuns& runs,
                  const std::optional<at::Tensor>& found_inf) {
  if (!params.defined() || params.scalar_type() != at::kFloat || params.dim() != 1)
    throw Error(std::string(fn) + ": params must be a 1-d fp32 tensor, got " + describe(params));
  if (params.numel() != runs.segment_numel())
    throw Error(std::string(fn) + ": the runs describe a segment of " + std::to_string(runs.segment_numel()) +
                " elements, params have " + std::to_string(params.numel()));
  if (runs.params_on_device().defined() && runs.params_on_device().device() != params.device())
    throw Error(std::string(fn) + ": the runs were made for " + runs.params_on_device().device().str() +
                ", params are on " + params.device().str());
  check_flat(fn, "state.exp_avg", state.exp_avg, params, {at::kFloat});
  check_flat(fn, "state.exp_avg_sq", state.exp_avg_sq, params, {at::kFloat});
  check_scalar(fn, "state.step", state.step, params);
  if (found_inf) check_scalar(fn, "found_inf", *found_inf, params);
}

// Bias corrections 1 - b^step as 0-dim fp32 tensors beside the step count
// (no host sync); undefined without bias correction.
struct Corrections {
  at::Tensor bc1, bc2;
};
Corrections corrections(const config::OptimizerConfig& o, double beta1, const at::Tensor& step) {
  if (!o.bias_correction) return {};
  const at::Tensor s = step.reshape({});
  return {at::pow(beta1, s).neg_().add_(1.0), at::pow(o.beta2, s).neg_().add_(1.0)};
}

std::vector<at::Tensor> views(const at::Tensor& flat, const LambRuns& runs, std::pair<size_t, size_t> group) {
  std::vector<at::Tensor> out;
  out.reserve(group.second - group.first);
  for (size_t k = group.first; k < group.second; ++k)
    out.push_back(flat.narrow(0, runs.runs()[k].offset, runs.runs()[k].numel));
  return out;
}

// u = m^ / (sqrt(v^) + eps) + wd p, new tensors.
std::vector<at::Tensor> direction(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& m,
                                  const std::vector<at::Tensor>& v, const Corrections& c,
                                  const config::OptimizerConfig& o) {
  std::vector<at::Tensor> denom;
  if (c.bc2.defined()) {
    denom = at::_foreach_div(v, c.bc2);
    at::_foreach_sqrt_(denom);
  } else {
    denom = at::_foreach_sqrt(v);
  }
  at::_foreach_add_(denom, o.eps);
  std::vector<at::Tensor> u;
  if (c.bc1.defined()) {
    u = at::_foreach_div(m, c.bc1);
    at::_foreach_div_(u, denom);
  } else {
    u = at::_foreach_div(m, denom);
  }
  if (o.weight_decay != 0.0) at::_foreach_add_(u, p, o.weight_decay);
  return u;
}

// dst = value, or where(keep, value, dst) when a found_inf was given.
void commit(const at::Tensor& dst, const at::Tensor& value, const at::Tensor& keep) {
  dst.copy_(keep.defined() ? at::where(keep, value, dst) : value);
}

}  // namespace

LambRuns::LambRuns(std::vector<ParamRun> runs, int64_t segment_numel, int64_t num_params, c10::Device device,
                   int64_t max_piece)
    : segment_numel_(segment_numel), num_params_(num_params) {
  if (max_piece < 1) throw Error("LambRuns: max_piece must be >= 1");
  int64_t end = 0;
  std::vector<int64_t> ids;
  for (size_t k = 0; k < runs.size(); ++k) {
    const ParamRun& r = runs[k];
    if (r.numel < 1 || r.offset < end || r.offset > segment_numel - r.numel || r.param < 0 || r.param >= num_params)
      throw Error("LambRuns: run " + std::to_string(k) + " (parameter " + std::to_string(r.param) + ", elements " +
                  std::to_string(r.offset) + " + " + std::to_string(r.numel) + ") is empty, overlaps the run before, " +
                  "leaves the segment of " + std::to_string(segment_numel) + " elements or names no parameter of " +
                  std::to_string(num_params));
    end = r.offset + r.numel;
    for (int64_t off = 0; off < r.numel; off += max_piece) {
      runs_.push_back(ParamRun{r.param, r.offset + off, std::min(max_piece, r.numel - off)});
      ids.push_back(r.param);
    }
  }
  int64_t in_group = 0;
  for (size_t k = 0; k < runs_.size(); ++k) {
    if (groups_.empty() || in_group + runs_[k].numel > max_piece) {
      groups_.emplace_back(k, k);
      in_group = 0;
    }
    groups_.back().second = k + 1;
    in_group += runs_[k].numel;
  }
  param_ids_ = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).to(device);
}

at::Tensor lamb_norms_buffer(int64_t num_params, c10::Device device) {
  return at::zeros({2, num_params}, at::TensorOptions().dtype(at::kFloat).device(device));
}

void lamb_moments(const at::Tensor& params, const at::Tensor& grads, AdamState& state, const LambRuns& runs,
                  const config::OptimizerConfig& o, std::optional<double> beta1_override, const at::Tensor& grad_scale,
                  at::Tensor& sq_norms, const std::optional<at::Tensor>& found_inf) {
  constexpr const char* fn = "lamb_moments";
  check_common(fn, params, state, runs, found_inf);
  check_flat(fn, "grads", grads, params, {at::kFloat, at::kBFloat16, at::kHalf});
  if (grad_scale.defined()) check_scalar(fn, "grad_scale", grad_scale, params);
  if (!sq_norms.defined() || sq_norms.dim() != 2 || sq_norms.size(0) != 2 || sq_norms.size(1) != runs.num_params() ||
      !at::isFloatingType(sq_norms.scalar_type()) || sq_norms.device() != params.device())
    throw Error(std::string(fn) + ": sq_norms must be a floating [2, " + std::to_string(runs.num_params()) +
                "] tensor on " + params.device().str() + " (lamb_norms_buffer), got " + describe(sq_norms));

  const double beta1 = beta1_override.value_or(o.beta1), beta2 = o.beta2;
  const at::Tensor keep = found_inf ? found_inf->reshape({}).eq(0) : at::Tensor();
  if (found_inf) state.step.add_(1.0 - found_inf->reshape({}));
  else state.step.add_(1);
  const Corrections c = corrections(o, beta1, state.step);
  const at::Tensor scale = grad_scale.defined() ? grad_scale.reshape({}) : at::Tensor();
  for (const auto& group : runs.groups()) {
    const std::vector<at::Tensor> p = views(params, runs, group), m = views(state.exp_avg, runs, group),
                                  v = views(state.exp_avg_sq, runs, group);
    std::vector<at::Tensor> g = views(grads, runs, group);
    if (grads.scalar_type() != at::kFloat)
      for (auto& t : g) t = t.to(at::kFloat);
    if (scale.defined()) g = at::_foreach_div(g, scale);  // new tensors: the gradient stays as given
    if (!keep.defined()) {
      at::_foreach_mul_(m, beta1);
      at::_foreach_add_(m, g, 1.0 - beta1);
      at::_foreach_mul_(v, beta2);
      at::_foreach_addcmul_(v, g, g, 1.0 - beta2);
    } else {
      std::vector<at::Tensor> m_new = at::_foreach_mul(m, beta1), v_new = at::_foreach_mul(v, beta2);
      at::_foreach_add_(m_new, g, 1.0 - beta1);
      at::_foreach_addcmul_(v_new, g, g, 1.0 - beta2);
      for (size_t k = 0; k < m.size(); ++k) {
        commit(m[k], m_new[k], keep);
        commit(v[k], v_new[k], keep);
      }
    }
    const std::vector<at::Tensor> u = direction(p, m, v, c, o);
    const at::Tensor ids = runs.params_on_device().narrow(0, group.first, group.second - group.first);
    const at::Tensor p_sq = at::stack(at::_foreach_norm(p)).square().to(sq_norms.scalar_type());
    const at::Tensor u_sq = at::stack(at::_foreach_norm(u)).square().to(sq_norms.scalar_type());
    sq_norms.select(0, 0).index_add_(0, ids, p_sq);
    sq_norms.select(0, 1).index_add_(0, ids, u_sq);
  }
}

at::Tensor lamb_trust_ratios(const at::Tensor& sq_norms, const config::OptimizerConfig& o) {
  if (!sq_norms.defined() || sq_norms.dim() != 2 || sq_norms.size(0) != 2 || !at::isFloatingType(sq_norms.scalar_type()))
    throw Error("lamb_trust_ratios: sq_norms must be a floating [2, parameters] tensor, got " + describe(sq_norms));
  const at::Tensor p_norm = sq_norms.select(0, 0).sqrt(), u_norm = sq_norms.select(0, 1).sqrt();
  const at::Tensor ratio = (p_norm / u_norm).clamp_(o.min_coeff, o.max_coeff);
  return at::where(p_norm.gt(0).logical_and_(u_norm.gt(0)), ratio, at::ones_like(ratio));
}

void lamb_update(at::Tensor& params, const AdamState& state, const LambRuns& runs, const config::OptimizerConfig& o,
                 double lr, std::optional<double> beta1_override, const at::Tensor& trust_ratios,
                 const at::Tensor& params16, const std::optional<at::Tensor>& found_inf) {
  constexpr const char* fn = "lamb_update";
  check_common(fn, params, state, runs, found_inf);
  if (!trust_ratios.defined() || trust_ratios.dim() != 1 || trust_ratios.numel() != runs.num_params() ||
      trust_ratios.device() != params.device())
    throw Error(std::string(fn) + ": trust_ratios must be a 1-d tensor of " + std::to_string(runs.num_params()) +
                " elements on " + params.device().str() + " (lamb_trust_ratios), got " + describe(trust_ratios));
  if (params16.defined()) check_flat(fn, "params16", params16, params, {at::kBFloat16, at::kHalf, at::kFloat});

  const at::Tensor keep = found_inf ? found_inf->reshape({}).eq(0) : at::Tensor();
  const Corrections c = corrections(o, beta1_override.value_or(o.beta1), state.step);
  for (const auto& group : runs.groups()) {
    const std::vector<at::Tensor> p = views(params, runs, group), m = views(state.exp_avg, runs, group),
                                  v = views(state.exp_avg_sq, runs, group);
    std::vector<at::Tensor> u = direction(p, m, v, c, o);
    const at::Tensor ids = runs.params_on_device().narrow(0, group.first, group.second - group.first);
    const at::Tensor r = trust_ratios.index_select(0, ids).to(at::kFloat);
    for (size_t k = 0; k < u.size(); ++k) u[k].mul_(r.select(0, static_cast<int64_t>(k)));
    if (!keep.defined()) {
      at::_foreach_add_(p, u, -lr);
    } else {
      const std::vector<at::Tensor> p_new = at::_foreach_add(p, u, -lr);
      for (size_t k = 0; k < p.size(); ++k) commit(p[k], p_new[k], keep);
    }
    if (params16.defined()) {
      std::vector<at::Tensor> out = views(params16, runs, group);
      at::_foreach_copy_(out, p);  // one multi-tensor pass, not a copy kernel per run
    }
  }
}

void lamb_step(at::Tensor& params, const at::Tensor& grads, AdamState& state, const LambRuns& runs,
               const config::OptimizerConfig& o, double lr, std::optional<double> beta1_override,
               const at::Tensor& grad_scale, const std::function<void(at::Tensor&)>& reduce_sq_norms,
               const std::optional<at::Tensor>& found_inf) {
  at::Tensor sq = lamb_norms_buffer(runs.num_params(), params.device());
  lamb_moments(params, grads, state, runs, o, beta1_override, grad_scale, sq, found_inf);
  if (reduce_sq_norms) reduce_sq_norms(sq);
  lamb_update(params, state, runs, o, lr, beta1_override, lamb_trust_ratios(sq, o), at::Tensor(), found_inf);
}

}  // namespace stratum::optim
