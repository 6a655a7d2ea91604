#include "stratum/engine/flops_profiler.h"

#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "stratum/core/error.h"
#include "stratum/nn/layer_stack.h"

namespace stratum {
namespace {

using Clock = std::chrono::steady_clock;

enum class CostKind {
  mm,          // (a [n, k], b [k, m]) and bmm's batched form
  addmm,       // (self, a, b): mm + self's elements (the added term)
  matmul,      // torch.matmul's broadcasting product
  linear,      // (x [..., in], w [out, in], bias): bias not counted, as DeepSpeed's _linear_flops_compute
  mv,          // (a [n, k], v [k])
  addmv,       // (self, a, v)
  dot,         // (a [k], b [k])
  sdpa,        // (q [.., h, s_q, d], k [.., h_k, s_k, d], v [.., h_k, s_k, d_v], ...)
  sdpa_bshd,   // the same with [b, s, h, d] layouts (_flash_attention_forward, _efficient_attention_forward)
};

const std::unordered_map<std::string_view, CostKind>& costed_ops() {
  static const std::unordered_map<std::string_view, CostKind> ops = {
      {"aten::mm", CostKind::mm},
      {"aten::bmm", CostKind::mm},
      {"aten::addmm", CostKind::addmm},
      {"aten::addmm_", CostKind::addmm},
      {"aten::_addmm_activation", CostKind::addmm},
      {"aten::baddbmm", CostKind::addmm},
      {"aten::baddbmm_", CostKind::addmm},
      {"aten::matmul", CostKind::matmul},
      {"aten::linear", CostKind::linear},
      {"aten::mv", CostKind::mv},
      {"aten::addmv", CostKind::addmv},
      {"aten::dot", CostKind::dot},
      {"aten::scaled_dot_product_attention", CostKind::sdpa},
      {"aten::_scaled_dot_product_flash_attention", CostKind::sdpa},
      {"aten::_scaled_dot_product_flash_attention_for_cpu", CostKind::sdpa},
      {"aten::_scaled_dot_product_efficient_attention", CostKind::sdpa},
      {"aten::_scaled_dot_product_cudnn_attention", CostKind::sdpa},
      {"aten::_scaled_dot_product_attention_math", CostKind::sdpa},
      {"aten::_scaled_dot_product_fused_attention_overrideable", CostKind::sdpa},
      {"aten::_flash_attention_forward", CostKind::sdpa_bshd},
      {"aten::_efficient_attention_forward", CostKind::sdpa_bshd},
      // nn/mlp.cpp: GPT-2's first MLP GEMM (x, w, b), on a GPU cuBLASLt with the GELU in its epilogue.
      {"stratum::linear_bias_gelu", CostKind::linear},
  };
  return ops;
}

const at::Tensor* tensor_at(c10::ArrayRef<const c10::IValue> in, size_t i) {
  if (i >= in.size() || !in[i].isTensor()) return nullptr;
  const at::Tensor& t = in[i].toTensor();
  return t.defined() ? &t : nullptr;
}

int64_t elements(const at::Tensor* t) { return t ? t->numel() : 0; }

// a [..., n, k] times b [..., k, m] with broadcast batch dimensions (torch.matmul's rules).
std::optional<int64_t> matmul_macs(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() == 0 || b.dim() == 0) return std::nullopt;
  if (a.dim() == 1 && b.dim() == 1) return a.size(0);
  if (b.dim() == 1) return a.numel();  // [..., n, k] x [k]
  if (a.dim() == 1) return b.numel();  // [k] x [..., k, m]
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  int64_t batch = 1;
  const int64_t da = a.dim() - 2, db = b.dim() - 2, d = std::max(da, db);
  for (int64_t i = 0; i < d; ++i) {
    const int64_t sa = i < d - da ? 1 : a.size(i - (d - da));
    const int64_t sb = i < d - db ? 1 : b.size(i - (d - db));
    batch *= std::max(sa, sb);
  }
  return batch * n * k * m;
}

// One thread's observer: the layers open now and how deep in costed ops it is.
thread_local FlopsProfiler::State* t_active = nullptr;

void synchronize(c10::Device device) {
  if (device.type() == c10::kCPU) return;
  c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
}

}  // namespace

struct FlopsProfiler::State {
  FlopsProfiler* owner = nullptr;
  std::unordered_map<std::string_view, size_t> scopes;  // layer scope name -> layer (views into owner's outline)
  std::vector<size_t> open_layers;                      // innermost last
  int costed_depth = 0;                                 // costed ops open: inner ones are not counted again
  Clock::time_point started;
};

namespace {

struct Span : at::ObserverContext {
  explicit Span(int64_t l) : layer(l) {}
  int64_t layer;  // -1: a costed op
  Clock::time_point start;
};

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  FlopsProfiler::State* s = t_active;
  if (!s) return nullptr;
  const std::string_view name = fn.name();
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    const auto it = s->scopes.find(name);
    if (it == s->scopes.end()) return nullptr;
    synchronize(s->owner->device());
    auto span = std::make_unique<Span>(static_cast<int64_t>(it->second));
    span->start = Clock::now();
    s->open_layers.push_back(it->second);
    return span;
  }
  if (!is_costed_op(name)) return nullptr;
  if (s->costed_depth++ == 0)
    if (const std::optional<OpCost> cost = op_cost(name, fn.inputs()))
      s->owner->add_cost(*cost, s->open_layers.empty() ? -1 : static_cast<int64_t>(s->open_layers.back()));
  return std::make_unique<Span>(-1);
}

void on_exit(const at::RecordFunction&, at::ObserverContext* ctx) {
  FlopsProfiler::State* s = t_active;
  if (!s || !ctx) return;
  const auto* span = static_cast<const Span*>(ctx);
  if (span->layer < 0) {
    --s->costed_depth;
    return;
  }
  synchronize(s->owner->device());
  s->owner->add_layer_time(static_cast<size_t>(span->layer),
                           std::chrono::duration<double>(Clock::now() - span->start).count());
  if (!s->open_layers.empty()) s->open_layers.pop_back();
}

}  // namespace

bool is_costed_op(std::string_view name) { return costed_ops().count(name) > 0; }

std::optional<OpCost> op_cost(std::string_view name, c10::ArrayRef<const c10::IValue> in) {
  const auto it = costed_ops().find(name);
  if (it == costed_ops().end()) return std::nullopt;
  const auto with = [](int64_t macs, int64_t extra = 0) { return OpCost{macs, 2 * macs + extra}; };
  switch (it->second) {
    case CostKind::mm: {
      const at::Tensor *a = tensor_at(in, 0), *b = tensor_at(in, 1);
      if (!a || !b || b->dim() < 1) return std::nullopt;
      return with(a->numel() * b->size(-1));
    }
    case CostKind::addmm: {
      const at::Tensor *self = tensor_at(in, 0), *a = tensor_at(in, 1), *b = tensor_at(in, 2);
      if (!a || !b || b->dim() < 1) return std::nullopt;
      return with(a->numel() * b->size(-1), elements(self));
    }
    case CostKind::matmul: {
      const at::Tensor *a = tensor_at(in, 0), *b = tensor_at(in, 1);
      if (!a || !b) return std::nullopt;
      const std::optional<int64_t> macs = matmul_macs(*a, *b);
      if (!macs) return std::nullopt;
      return with(*macs);
    }
    case CostKind::linear: {
      const at::Tensor *x = tensor_at(in, 0), *w = tensor_at(in, 1);
      if (!x || !w) return std::nullopt;
      return with(x->numel() * (w->dim() == 2 ? w->size(0) : 1));
    }
    case CostKind::mv: {
      const at::Tensor* a = tensor_at(in, 0);
      if (!a) return std::nullopt;
      return with(a->numel());
    }
    case CostKind::addmv: {
      const at::Tensor *self = tensor_at(in, 0), *a = tensor_at(in, 1);
      if (!a) return std::nullopt;
      return with(a->numel(), elements(self));
    }
    case CostKind::dot: {
      const at::Tensor* a = tensor_at(in, 0);
      if (!a) return std::nullopt;
      return with(a->numel());
    }
    case CostKind::sdpa:
    case CostKind::sdpa_bshd: {
      const at::Tensor *q = tensor_at(in, 0), *k = tensor_at(in, 1), *v = tensor_at(in, 2);
      if (!q || !k || !v || q->dim() < 2 || k->dim() < 2 || v->dim() < 1 || q->size(-1) == 0) return std::nullopt;
      const int64_t s_k = it->second == CostKind::sdpa_bshd ? k->size(1) : k->size(-2);
      // q kᵀ: every query row against every key; then the weights times v. Causal or not.
      return with(q->numel() * s_k + q->numel() / q->size(-1) * s_k * v->size(-1));
    }
  }
  return std::nullopt;
}

ModelOutline model_outline(const torch::nn::Module& module, const nn::LayerStackImpl* stack) {
  ModelOutline o;
  o.model.kind = module.name();
  std::unordered_set<const void*> seen;
  for (const auto& p : module.parameters(/*recurse=*/true))
    if (seen.insert(p.unsafeGetTensorImpl()).second) o.model.params += p.numel();
  if (!stack) return o;
  for (size_t i = 0; i < stack->size(); ++i) {
    ProfiledModule m;
    m.name = "layers." + std::to_string(i);
    m.kind = stack->layer(i).name();
    m.where = stack->layer_path(i);
    m.scope = stack->layer_scope(i);
    for (const auto& p : stack->layer(i).parameters(/*recurse=*/true)) m.params += p.numel();
    o.layers.push_back(std::move(m));
  }
  return o;
}

FlopsProfiler::FlopsProfiler(const config::FlopsProfilerConfig& config, ModelOutline outline, c10::Device device)
    : config_(config), outline_(std::move(outline)), device_(device), layers_(outline_.layers.size()) {}

FlopsProfiler::~FlopsProfiler() { cancel(); }

void FlopsProfiler::reset() {
  model_ = ModuleProfile{};
  layers_.assign(outline_.layers.size(), ModuleProfile{});
  passes_ = 0;
}

void FlopsProfiler::add_cost(const OpCost& cost, int64_t layer) {
  model_.macs += cost.macs;
  model_.flops += cost.flops;
  if (layer >= 0) {
    layers_[layer].macs += cost.macs;
    layers_[layer].flops += cost.flops;
  }
}

void FlopsProfiler::add_layer_time(size_t layer, double seconds) { layers_[layer].seconds += seconds; }

void FlopsProfiler::start() {
  if (running()) return;
  if (t_active) throw Error("flops profiler: another profile is running on this thread");
  state_ = std::make_unique<State>();
  state_->owner = this;
  for (size_t i = 0; i < outline_.layers.size(); ++i) state_->scopes.emplace(outline_.layers[i].scope, i);
  synchronize(device_);
  state_->started = Clock::now();
  t_active = state_.get();
  // Thread-local: ops run by other threads (autograd's, a data loader's) are not seen.
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                                           .needsInputs(true)
                                           .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
}

void FlopsProfiler::stop() {
  if (!running()) return;
  synchronize(device_);
  model_.seconds += std::chrono::duration<double>(Clock::now() - state_->started).count();
  ++passes_;
  cancel();
}

void FlopsProfiler::cancel() {
  if (!running()) return;
  at::removeCallback(handle_);
  handle_ = 0;
  if (t_active == state_.get()) t_active = nullptr;
  state_.reset();
}

// --- the report ----------------------------------------------------------------------

namespace {

double round2(double v) { return std::round(v * 100.0) / 100.0; }

std::string g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string percent(double part, double total) { return g(total != 0 ? round2(100.0 * part / total) : 0.0); }

// Python's repr of a dict of strings: {'GPT2Block': '3.15 M', 'LMHead': '0'}.
std::string dict(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string s = "{";
  for (size_t i = 0; i < items.size(); ++i)
    s += (i ? ", '" : "'") + items[i].first + "': '" + items[i].second + "'";
  return s + "}";
}

}  // namespace

std::string profile_number(double num) {
  double magnitude = 1;
  const char* units = "";
  const double a = std::fabs(num);
  if (a >= 1e12) magnitude = 1e12, units = "T";
  else if (a >= 1e9) magnitude = 1e9, units = "G";
  else if (a >= 1e6) magnitude = 1e6, units = "M";
  else if (a >= 1e3) magnitude = 1e3, units = "K";
  else if (a >= 1 || a == 0) magnitude = 1, units = "";
  else if (a >= 1e-3) magnitude = 1e-3, units = "m";
  else magnitude = 1e-6, units = "u";
  return g(round2(num / magnitude)) + " " + units;
}

std::string profile_params(double value) {
  std::string s = profile_number(value);
  if (!s.empty() && s.back() == 'G') s.back() = 'B';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}
std::string profile_macs(double value) { return profile_number(value) + "MACs"; }
std::string profile_flops(double value) { return profile_number(value) + "FLOPS"; }
std::string profile_duration(double seconds) { return profile_number(seconds) + "s"; }

std::string FlopsProfiler::report(const StepFacts& f) const {
  std::ostringstream out;
  const auto line = [&](const std::string& label, const std::string& value) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%-70s  %s\n", label.c_str(), value.c_str());
    out << buf;
  };
  const double flops = static_cast<double>(model_.flops), macs = static_cast<double>(model_.macs);
  const double params = static_cast<double>(outline_.model.params);
  const double fwd = f.fwd_seconds, bwd = f.bwd_seconds, step = f.step_seconds, iter = fwd + bwd + step;
  const double bwd_factor = 2.0 + config_.recompute_fwd_factor;
  const auto per_second = [](double x, double s) { return s > 0 ? x / s : 0.0; };

  out << "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n";
  out << "Profile Summary at step " << f.profile_step << ":\n";
  out << "Notations:\n"
         "data parallel size (dp_size), model parallel size (mp_size),\n"
         "number of parameters (params), number of multiply-accumulate operations (MACs),\n"
         "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
         "fwd latency (forward pass latency), bwd latency (backward pass latency),\n"
         "step (optimizer step latency), iter latency (fwd + bwd + step latency).\n"
         "Figures sum the step's "
      << f.gradient_accumulation_steps << " micro-batch" << (f.gradient_accumulation_steps == 1 ? "" : "es")
      << " (" << passes_ << " forward pass" << (passes_ == 1 ? "" : "es") << " profiled).\n\n";
  line("world size: ", std::to_string(f.world_size));
  line("data parallel size: ", std::to_string(f.dp_size));
  line("model parallel size: ", std::to_string(f.mp_size));
  line("batch size per GPU: ", std::to_string(f.micro_batch));
  line("gradient accumulation steps: ", std::to_string(f.gradient_accumulation_steps));
  line("params per GPU: ", profile_params(params));
  line("params of model = params per GPU * mp_size: ", profile_params(params * static_cast<double>(f.mp_size)));
  line("fwd MACs per GPU: ", profile_macs(macs));
  line("fwd flops per GPU: ", profile_number(flops));
  line("fwd flops of model = fwd flops per GPU * mp_size: ", profile_number(flops * static_cast<double>(f.mp_size)));
  line("fwd latency: ", profile_duration(fwd));
  line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", profile_flops(per_second(flops, fwd)));
  line("bwd latency: ", profile_duration(bwd));
  line("bwd FLOPS per GPU = " + g(bwd_factor) + " * fwd flops per GPU / bwd latency: ",
       profile_flops(per_second(bwd_factor * flops, bwd)));
  line("fwd+bwd FLOPS per GPU = " + g(bwd_factor + 1) + " * fwd flops per GPU / (fwd+bwd latency): ",
       profile_flops(per_second((bwd_factor + 1) * flops, fwd + bwd)));
  line("step latency: ", profile_duration(step));
  line("iter latency: ", profile_duration(iter));
  line("FLOPS per GPU = " + g(bwd_factor + 1) + " * fwd flops per GPU / iter latency: ",
       profile_flops(per_second((bwd_factor + 1) * flops, iter)));
  const double samples = static_cast<double>(f.micro_batch * f.gradient_accumulation_steps * f.dp_size);
  line("samples/second: ", g(round2(per_second(samples, iter))));

  // Aggregated: per depth, per class, (MACs, params, latency) summed in order of first appearance.
  struct Sums {
    double macs = 0, params = 0, seconds = 0;
  };
  std::vector<std::vector<std::pair<std::string, Sums>>> depths(outline_.layers.empty() ? 1 : 2);
  depths[0].push_back({outline_.model.kind, Sums{macs, params, model_.seconds}});
  for (size_t i = 0; i < outline_.layers.size(); ++i) {
    auto& level = depths[1];
    auto it = std::find_if(level.begin(), level.end(), [&](const auto& e) { return e.first == outline_.layers[i].kind; });
    if (it == level.end()) it = level.insert(level.end(), {outline_.layers[i].kind, Sums{}});
    it->second.macs += static_cast<double>(layers_[i].macs);
    it->second.params += static_cast<double>(outline_.layers[i].params);
    it->second.seconds += layers_[i].seconds;
  }
  const int64_t max_depth = static_cast<int64_t>(depths.size()) - 1;
  const int64_t depth = config_.module_depth < 0 ? max_depth : std::min(config_.module_depth, max_depth);
  out << "\n----------------------------- Aggregated Profile per GPU -----------------------------\n";
  out << "Top " << config_.top_modules << " modules in terms of params, MACs or fwd latency at different model depths:\n";
  for (int64_t d = 0; d <= depth; ++d) {
    const auto top = [&](double Sums::*field, std::string (*format)(double)) {
      std::vector<std::pair<std::string, Sums>> sorted = depths[d];
      std::stable_sort(sorted.begin(), sorted.end(),
                       [&](const auto& a, const auto& b) { return a.second.*field > b.second.*field; });
      std::vector<std::pair<std::string, std::string>> items;
      for (size_t i = 0; i < sorted.size() && static_cast<int64_t>(i) < config_.top_modules; ++i)
        items.push_back({sorted[i].first, format(sorted[i].second.*field)});
      return dict(items);
    };
    out << "depth " << d << ":\n";
    out << "    params      - " << top(&Sums::params, &profile_params) << "\n";
    out << "    MACs        - " << top(&Sums::macs, &profile_macs) << "\n";
    out << "    fwd latency - " << top(&Sums::seconds, &profile_duration) << "\n";
  }

  if (config_.detailed) {
    out << "\n------------------------------ Detailed Profile per GPU ------------------------------\n";
    out << "Each module's figures follow its name: params, percentage of total params, MACs, percentage of total\n"
           "MACs, fwd latency, percentage of total fwd latency, fwd FLOPS (and, for a layer, its parameter prefix).\n\n"
           "Note: 1. Work outside the layers (the loss) counts for the model only, so the model's MACs and latency\n"
           "exceed the sum of its layers'.\n"
           "2. The flops are counted from the matrix products' shapes (elementwise ops are not counted); FLOPS from\n"
           "them may exceed what the device can run.\n"
           "3. The model's fwd latency is timed around its forward; the summary's fwd latency is the engine's\n"
           "forward timer, a little longer. Each layer is timed between device synchronizes.\n\n";
    const auto figures = [&](double p, double m, double seconds, double fl) {
      return profile_params(p) + " = " + percent(p, params) + "% Params, " + profile_macs(m) + " = " +
             percent(m, macs) + "% MACs, " + profile_duration(seconds) + " = " + percent(seconds, model_.seconds) +
             "% latency, " + profile_flops(seconds > 0 ? round2(fl / seconds) : 0.0);
    };
    const std::string top = figures(params, macs, model_.seconds, flops);
    if (outline_.layers.empty()) {
      out << outline_.model.kind << "(" << top << ")\n";
    } else {
      out << outline_.model.kind << "(\n  " << top << "\n";
      for (size_t i = 0; i < outline_.layers.size(); ++i) {
        const ProfiledModule& m = outline_.layers[i];
        const ModuleProfile& p = layers_[i];
        out << "  (" << m.name << "): " << m.kind << "("
            << figures(static_cast<double>(m.params), static_cast<double>(p.macs), p.seconds,
                       static_cast<double>(p.flops))
            << (m.where.empty() ? "" : ", " + m.where) << ")\n";
      }
      out << ")\n";
    }
  }
  out << "------------------------------------------------------------------------------\n";
  return out.str();
}

}  // namespace stratum
