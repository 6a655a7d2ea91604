#include "stratum/nn/moe/sparse_moe.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "stratum/core/error.h"
#include "stratum/distributed/wait_context.h"
#include "stratum/nn/context_parallel/context_parallel.h"
#include "stratum/nn/linear.h"
#include "stratum/nn/lora_linear.h"
#include "stratum/nn/moe/grouped_linear.h"
#include "stratum/nn/moe/load_balancing.h"

namespace stratum::nn::moe {

void check(const MoEOptions& o) {
  check(o.router);
  std::vector<std::string> problems;
  if (o.hidden < 1) problems.push_back("hidden must be positive");
  if (o.ffn_hidden < 1) problems.push_back("an expert's ffn_hidden must be positive");
  if (o.shared_ffn_hidden < 0) problems.push_back("the shared experts' ffn_hidden must be 0 (none) or positive");
  if (!(o.capacity_factor >= 0) || !std::isfinite(o.capacity_factor))
    problems.push_back("capacity_factor must be 0 (dropless) or positive");
  if (!(o.aux_loss_coeff >= 0) || !std::isfinite(o.aux_loss_coeff)) problems.push_back("aux_loss_coeff must be >= 0");
  if (!(o.z_loss_coeff >= 0) || !std::isfinite(o.z_loss_coeff)) problems.push_back("z_loss_coeff must be >= 0");
  if (!(o.expert_bias_rate >= 0) || !std::isfinite(o.expert_bias_rate))
    problems.push_back("expert_bias_rate must be >= 0");
  if (problems.empty()) return;
  std::string msg = "MoE layer: ";
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  throw Error(msg);
}

ExpertImpl::ExpertImpl(int64_t hidden, int64_t ffn_hidden, const ExpertNames& names, c10::Device device)
    : torch::nn::Module("Expert") {
  gate = register_module(names.gate, Linear(hidden, ffn_hidden, /*bias=*/false, device));
  up = register_module(names.up, Linear(hidden, ffn_hidden, /*bias=*/false, device));
  down = register_module(names.down, Linear(ffn_hidden, hidden, /*bias=*/false, device));
}

SparseMoEImpl::SparseMoEImpl(const MoEOptions& options, int64_t layer, std::shared_ptr<RoutingRecord> record,
                             c10::Device device, ExpertParallel ep, tp::TensorParallel tp)
    : torch::nn::Module("SparseMoE"),
      options_(options),
      layer_(layer),
      ep_(std::move(ep)),
      tp_(std::move(tp)),
      record_(std::move(record)) {
  check(options_);
  const int64_t e = options_.router.num_experts;
  if (e % ep_.size() != 0)
    throw Error("MoE layer " + std::to_string(layer) + ": " + std::to_string(e) + " experts do not split over " +
                std::to_string(ep_.size()) + " expert-parallel ranks (moe.expert_parallel_size must divide num_experts)");
  const int64_t local = e / ep_.size();
  first_expert_ = ep_.rank() * local;
  gate = register_module("gate", Linear(options_.hidden, e, /*bias=*/false, device));
  experts = register_module("experts", std::make_shared<torch::nn::Module>("Experts"));
  for (int64_t i = first_expert_; i < first_expert_ + local; ++i) {
    expert_list.push_back(std::make_shared<ExpertImpl>(options_.hidden, options_.ffn_hidden, options_.names, device));
    experts->register_module(std::to_string(i), expert_list.back());
  }
  if (options_.shared_ffn_hidden > 0)
    shared_experts = register_module("shared_experts",
                                     std::make_shared<SwiGLUMLPImpl>(options_.hidden, options_.shared_ffn_hidden,
                                                                     options_.recompute_activation, tp::TensorParallel{},
                                                                     device));
  if (options_.expert_bias_rate > 0) expert_bias_ = at::zeros({e}, at::kFloat);
}

void SparseMoEImpl::set_expert_bias(const at::Tensor& bias) {
  if (!expert_bias_.defined()) throw Error("MoE layer " + std::to_string(layer_) + ": has no expert bias to set");
  if (bias.dim() != 1 || bias.size(0) != options_.router.num_experts)
    throw Error("MoE layer " + std::to_string(layer_) + ": an expert bias must be [" +
                std::to_string(options_.router.num_experts) + "], got " + c10::str(bias.sizes()));
  expert_bias_ = bias.to(expert_bias_.device(), at::kFloat).clone();
}

void SparseMoEImpl::update_expert_bias(const at::Tensor& load) {
  if (!expert_bias_.defined()) return;
  const at::Tensor l = load.to(expert_bias_.device(), at::kFloat);
  expert_bias_.add_(at::sign(l.mean() - l), options_.expert_bias_rate);
}

namespace {

// For each assignment (flat index i = token * k + slot) in `order` (sorted
// by expert), whether it fits its expert's capacity: the first `capacity`
// of each expert's run.
at::Tensor within_capacity(const at::Tensor& sorted_experts, const std::vector<int64_t>& counts, int64_t capacity) {
  std::vector<int64_t> starts(counts.size());
  int64_t sum = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    starts[e] = sum;
    sum += counts[e];
  }
  const at::Tensor start = at::tensor(starts, at::kLong).to(sorted_experts.device()).index_select(0, sorted_experts);
  const at::Tensor rank = at::arange(sorted_experts.size(0), sorted_experts.options()) - start;
  return rank < capacity;
}

}  // namespace

bool SparseMoEImpl::experts_adapted() const {
  for (const auto& ex : expert_list)
    for (const LinearImpl* l : {ex->gate.get(), ex->up.get(), ex->down.get()})
      if (l->has_lora() || l->nf4_base) return true;
  return false;
}

at::Tensor SparseMoEImpl::run_adapted_experts(const at::Tensor& rows, const std::vector<int64_t>& counts) {
  const bool training = is_training();
  std::vector<at::Tensor> out;
  int64_t first = 0;
  for (size_t j = 0; j < expert_list.size(); ++j) {
    // An expert without rows runs too (on none): its adapters get their zero gradient.
    const ExpertImpl& ex = *expert_list[j];
    const at::Tensor x = rows.narrow(0, first, counts[j]);
    first += counts[j];
    const std::vector<const LinearImpl*> gate_and_up{ex.gate.get(), ex.up.get()};
    const at::Tensor gate_up = add_lora_terms(frozen_linear_stacked(x, gate_and_up), x, gate_and_up, training);
    const at::Tensor act = nn::swiglu(gate_up);
    out.push_back(add_lora_terms(frozen_linear(act, *ex.down), act, {ex.down.get()}, training));
  }
  return at::cat(out);  // a rank holds at least one expert
}

at::Tensor SparseMoEImpl::run_experts(const at::Tensor& rows, const std::vector<int64_t>& counts) {
  if (experts_adapted()) return run_adapted_experts(rows, counts);
  std::vector<std::vector<at::Tensor>> gate_up(2), down(1);
  for (const auto& ex : expert_list) {
    gate_up[0].push_back(ex->gate->weight);
    gate_up[1].push_back(ex->up->weight);
    down[0].push_back(ex->down->weight);
  }
  const at::Tensor h = grouped_linear(rows, counts, gate_up);  // [N, 2F]
  return grouped_linear(nn::swiglu(h), counts, down);          // [N, C]
}

at::Tensor SparseMoEImpl::remote_experts(const at::Tensor& rows, const std::vector<int64_t>& counts) {
  const int64_t p = ep_.size(), me = ep_.rank(), local = static_cast<int64_t>(expert_list.size());
  // `counts`: after any capacity drop, what is sent. [P, E]: each rank's, for each expert.
  // On the rows' device: an NCCL group takes no host tensors.
  const at::Tensor all = gather_counts(at::tensor(counts, at::kLong).to(rows.device()), ep_);
  const auto c = all.accessor<int64_t, 2>();
  std::vector<int64_t> send(static_cast<size_t>(p), 0), recv(static_cast<size_t>(p), 0);
  for (int64_t q = 0; q < p; ++q)
    for (int64_t j = 0; j < local; ++j) {
      send[static_cast<size_t>(q)] += c[me][q * local + j];
      recv[static_cast<size_t>(q)] += c[q][first_expert_ + j];
    }
  const at::Tensor received = exchange_rows(rows, send, recv, ep_);  // by sending rank, then expert
  // Regrouped by expert (then sending rank) for the grouped GEMM, and back after it.
  std::vector<int64_t> by_expert, expert_rows(static_cast<size_t>(local), 0);
  std::vector<int64_t> rank_start(static_cast<size_t>(p), 0);
  for (int64_t q = 1; q < p; ++q) rank_start[static_cast<size_t>(q)] = rank_start[static_cast<size_t>(q - 1)] + recv[static_cast<size_t>(q - 1)];
  for (int64_t j = 0; j < local; ++j)
    for (int64_t q = 0; q < p; ++q) {
      int64_t at_row = rank_start[static_cast<size_t>(q)];
      for (int64_t i = 0; i < j; ++i) at_row += c[q][first_expert_ + i];
      for (int64_t r = 0; r < c[q][first_expert_ + j]; ++r) by_expert.push_back(at_row + r);
      expert_rows[static_cast<size_t>(j)] += c[q][first_expert_ + j];
    }
  const at::Tensor order = at::tensor(by_expert, at::kLong).to(rows.device());
  const at::Tensor out = run_experts(received.index_select(0, order), expert_rows);
  // Back in the order received (an index_select's inverse), then to the tokens' ranks.
  const at::Tensor restored = at::zeros_like(out).index_add(0, order, out);
  return exchange_rows(restored, recv, send, ep_);
}

at::Tensor SparseMoEImpl::forward(const at::Tensor& x) {
  const MoEOptions& o = options_;
  const int64_t c = o.hidden, e = o.router.num_experts, k = o.router.top_k;
  if (x.size(-1) != c) throw Error("MoE layer: input has " + std::to_string(x.size(-1)) + " features, not " + std::to_string(c));
  const at::Tensor x2 = x.reshape({-1, c});
  const int64_t tokens = x2.size(0);
  const at::Tensor logits = nn::linear(x2, gate->weight);  // [T, E] in the model's dtype
  if (expert_bias_.defined() && expert_bias_.device() != logits.device()) expert_bias_ = expert_bias_.to(logits.device());
  const Routing r = route(logits, expert_bias_, o.router);

  // Every assignment sorted by expert (stable: token order within an expert).
  const at::Tensor flat_experts = r.experts.reshape({-1});
  const at::Tensor flat_weights = r.weights.reshape({-1});
  at::Tensor order;
  if (o.capacity_factor > 0 && o.drop_policy == DropPolicy::probs) {
    // By weight (highest first), then stably by expert: each expert's run best first.
    const at::Tensor by_weight = std::get<1>(flat_weights.detach().sort(/*stable=*/true, 0, /*descending=*/true));
    order = by_weight.index_select(0, std::get<1>(flat_experts.index_select(0, by_weight).sort(true, 0, false)));
  } else {
    order = std::get<1>(flat_experts.sort(/*stable=*/true, 0, false));
  }
  const at::Tensor sorted_experts = flat_experts.index_select(0, order);
  const at::Tensor routed = tokens_per_expert(r.experts, e);
  // The GEMMs' row counts on the host: the one synchronization. A training
  // forward whose sequences are split over ranks (sequence or context
  // parallelism) gathers the group's counts instead (every rank's, [n, E]),
  // which the balancing terms need.
  const bool training = is_training() && c10::GradMode::is_enabled();
  const SequenceSplit split = training ? sequence_split() : SequenceSplit{};
  const at::Tensor host_counts = split.gather(routed);
  const at::Tensor routed_host = host_counts[split.rank()].contiguous();
  std::vector<int64_t> counts(routed_host.data_ptr<int64_t>(), routed_host.data_ptr<int64_t>() + e);
  int64_t capacity = -1;  // none: dropless
  if (o.capacity_factor > 0) {
    capacity =
        static_cast<int64_t>(std::ceil(o.capacity_factor * static_cast<double>(tokens * k) / static_cast<double>(e)));
    const at::Tensor keep = within_capacity(sorted_experts, counts, capacity);
    order = order.masked_select(keep);
    for (int64_t& n : counts) n = std::min(n, capacity);
  }
  const at::Tensor token_of = at::floor_divide(order, k);
  const at::Tensor rows = x2.index_select(0, token_of);  // grouped by expert, so by the expert's rank
  at::Tensor y = ep_.enabled() ? remote_experts(rows, counts) : run_experts(rows, counts);
  y = y * flat_weights.index_select(0, order).to(y.scalar_type()).unsqueeze(1);
  at::Tensor out = at::zeros({tokens, c}, y.options()).index_add(0, token_of, y);
  if (shared_experts) out = out + shared_experts->forward(x2);

  // The balancing terms: their gradients joined to the output's backward.
  if (training) {
    const Balance b = balance(x, logits, r, routed, host_counts, capacity, split);
    const at::Tensor factor = record_ ? record_->backward_factor() : at::Tensor();
    // Context-parallel ranks' gradients are averaged: a share enters cp times.
    const double n = split.cp ? static_cast<double>(split.cp->size()) : 1.0;
    if (b.aux.defined() && o.aux_loss_coeff > 0) out = attach_aux_loss(out, b.aux * (o.aux_loss_coeff * n), factor);
    if (b.z.defined()) out = attach_aux_loss(out, b.z * (o.z_loss_coeff * n), factor);
    if (record_) record_->add(layer_, b.whole_routed, b.whole_dropped, b.whole_assigned, b.whole_aux, b.whole_z);
  }
  return out.view(x.sizes());
}

int64_t SparseMoEImpl::SequenceSplit::size() const {
  return (tp ? tp->size() : 1) * (cp ? cp->size() : 1);
}

int64_t SparseMoEImpl::SequenceSplit::rank() const {
  return (cp ? cp->rank() : 0) * (tp ? tp->size() : 1) + (tp ? tp->rank() : 0);
}

at::Tensor SparseMoEImpl::SequenceSplit::gather(const at::Tensor& counts) const {
  const at::Tensor within = gather_counts(counts, tp);  // [tp, E] on the host
  if (!cp) return within;
  return gather_counts(within.reshape({-1}).to(counts.device()), cp).view({-1, counts.numel()});
}

void SparseMoEImpl::SequenceSplit::all_reduce(at::Tensor& t, const char* what) const {
  for (const auto* group : {&tp, &cp}) {
    if (!*group || (*group)->size() == 1) continue;
    distributed::WaitContext waiting(what);
    (*group)->all_reduce(t, distributed::ReduceOp::sum)->wait();
  }
}

SparseMoEImpl::SequenceSplit SparseMoEImpl::sequence_split() const {
  SequenceSplit out;
  if (tp_.enabled() && tp_.sequence_parallel) out.tp = tp_.group;
  const SequenceLayout* rows = layout ? layout->get() : nullptr;
  if (rows && rows->context && rows->context->cp.enabled()) out.cp = rows->context->cp.group;
  return out;
}

SparseMoEImpl::Balance SparseMoEImpl::balance(const at::Tensor& x, const at::Tensor& logits, const Routing& r,
                                             const at::Tensor& routed, const at::Tensor& host_counts,
                                             int64_t capacity, const SequenceSplit& split) const {
  const MoEOptions& o = options_;
  const int64_t e = o.router.num_experts, k = o.router.top_k, tokens = logits.size(0);
  // The ranks holding a slice of each of the micro-batch's sequences (1, or
  // the group splitting them); their slices are of one size.
  const int64_t n = host_counts.size(0);
  const int64_t whole_tokens = tokens * n;
  Balance b;
  b.whole_routed = n > 1 ? host_counts.sum(0) : routed;
  b.whole_assigned = whole_tokens * k;
  if (capacity >= 0) b.whole_dropped = (host_counts - capacity).clamp_min(0).sum().item<int64_t>();
  const bool normalize = o.router.score == ScoreFunction::sigmoid;
  if (o.balancing == Balancing::aux_loss) {
    b.aux = aux_loss_share(r.scores, n > 1 ? b.whole_routed.to(r.scores.device()) : routed, whole_tokens, k, normalize);
  } else if (o.balancing == Balancing::sequence_aux_loss) {
    const int64_t sequences = x.dim() == 3 ? x.size(0) : 1;
    at::Tensor per_sequence = tokens_per_sequence_and_expert(r.experts, e, sequences);
    if (n > 1) split.all_reduce(per_sequence, "MoE: each sequence's tokens per expert over the ranks splitting it");
    b.aux = sequence_aux_loss_share(r.scores, per_sequence, tokens / sequences * n, k, normalize);
  }
  if (o.z_loss_coeff > 0) b.z = z_loss_share(logits, whole_tokens);
  if (b.aux.defined()) b.whole_aux = b.aux.detach();
  if (b.z.defined()) b.whole_z = b.z.detach();
  if (n > 1 && record_ && (b.aux.defined() || b.z.defined())) {
    // The record's values: the shares summed over the group (no wait on the host).
    const auto opts = r.scores.options().dtype(at::kFloat);
    at::Tensor both = at::stack({b.aux.defined() ? b.whole_aux.to(at::kFloat) : at::zeros({}, opts),
                                 b.z.defined() ? b.whole_z.to(at::kFloat) : at::zeros({}, opts)});
    split.all_reduce(both, "MoE: the balancing terms over the ranks splitting the sequences");
    if (b.aux.defined()) b.whole_aux = both[0];
    if (b.z.defined()) b.whole_z = both[1];
  }
  return b;
}

}  // namespace stratum::nn::moe
