#include "stratum/planning/layout_planner.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "stratum/core/error.h"
#include "stratum/models/flops.h"
#include "stratum/models/tensor_parallel_plan.h"
#include "stratum/pipeline/simulate.h"

namespace stratum::planning {

Hardware hardware_preset(const std::string& gpu) {
  const double gib = double(1ull << 30);
  Hardware h;
  h.gpu = gpu;
  if (gpu == "a100-40gb" || gpu == "a100-80gb") {
    h.gpu_memory = (gpu == "a100-40gb" ? 40 : 80) * gib;
    h.peak_flops = 312e12;
    h.node_bandwidth = 230e9;  // NVLink 3: nccl-tests' all_reduce bus bandwidth on 8 GPUs
    h.network_bandwidth = 25e9;  // a 200 Gb/s NIC a GPU
    h.host_link_bandwidth = 25e9;  // PCIe 4 x16
    return h;
  }
  if (gpu == "h100" || gpu == "h200") {
    h.gpu_memory = (gpu == "h100" ? 80 : 140) * gib;
    h.peak_flops = 989e12;
    h.node_bandwidth = 270e9;  // measured on 2 H200s (collectives-2gpu: 1 GiB all_gather)
    h.network_bandwidth = 50e9;  // a 400 Gb/s NIC a GPU
    h.host_link_bandwidth = 50e9;  // PCIe 5 x16
    return h;
  }
  std::string names;
  for (const auto& n : hardware_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error("unknown GPU '" + gpu + "'; known: " + names + " (or give its figures: --gpu-memory, --peak-tflops, ...)");
}

std::vector<std::string> hardware_names() { return {"a100-40gb", "a100-80gb", "h100", "h200"}; }

std::string describe(const Layout& l) {
  std::string s = "dp " + std::to_string(l.dp) + " x pp " + std::to_string(l.pp) + " x tp " + std::to_string(l.tp);
  if (l.sequence_parallel) s += " (sequence parallel)";
  if (l.ep > 1) s += ", experts over " + std::to_string(l.ep);
  if (l.cp > 1) {
    const ContextMethod m = context_method_of(l.cp, l.cp_ulysses);
    s += ", sequence over " + std::to_string(l.cp) + " (" + context_method_name(m) +
         (m == ContextMethod::hybrid ? ", Ulysses over " + std::to_string(l.cp_ulysses) : std::string()) + ")";
  }
  s += ", ZeRO-" + std::to_string(l.zero_stage);
  if (l.offload_param) s += ", offload optimizer and parameters";
  else if (l.offload_optimizer) s += ", offload optimizer";
  s += ", micro-batch " + std::to_string(l.micro_batch) + " x " + std::to_string(l.micro_batches);
  if (l.pp > 1) {
    s += std::string(", ") + config::pipeline_schedule_name(l.schedule);
    if (l.virtual_stages > 1) s += " x " + std::to_string(l.virtual_stages) + " chunks";
  }
  if (l.checkpointing) s += ", checkpointing";
  return s;
}

std::string describe_context(const Layout& l) {
  if (l.cp <= 1) return "-";
  const ContextMethod m = context_method_of(l.cp, l.cp_ulysses);
  const std::string n = std::to_string(l.cp);
  if (m == ContextMethod::ring) return n + " ring";
  if (m == ContextMethod::ulysses) return n + " uly";
  return n + " hyb" + std::to_string(l.cp_ulysses);
}

namespace {

struct ZeroChoice {
  int stage;
  bool offload_optimizer, offload_param;
};

// The figures of a layout that do not depend on its ZeRO stage and offload.
struct StageFigures {
  double params = 0;       // parameters one GPU of the stage holds (its tensor-parallel shard)
  double expert_params = 0;  // of them, a mixture of experts' routed experts
  std::vector<StateEstimate> states;  // every ZeRO and offload row over the stage's dp ranks
  double activations = 0, buffers = 0;
  double forward = 0, backward = 0;   // one micro-batch, all the stage's chunks (the collectives' windows)
};
struct Shared {
  std::vector<StageFigures> stages;
  double flops_per_token = 0;  // the whole model's, forward and backward (what MFU counts)
  StepTime time;  // pipeline, compute, bubble, tensor_parallel, transfers
};

int64_t world_of(const PlanRequest& r) { return r.shape.nodes * r.shape.gpus_per_node; }

EstimateInput input_for(const PlanRequest& r, const Layout& l) {
  EstimateInput in = r.shape;
  in.micro_batch = l.micro_batch;
  in.micro_batches = l.micro_batches;
  in.activation_checkpointing = l.checkpointing;
  in.pipeline_stages = l.pp;
  in.virtual_stages = l.virtual_stages;
  in.schedule = l.schedule;
  in.tensor_parallel = l.tp;
  in.sequence_parallel = l.sequence_parallel;
  in.expert_parallel = l.ep;
  in.context_parallel = l.cp;
  in.context_ulysses = l.cp_ulysses;
  if (r.model) set_model_shape(in, *r.model);
  return in;
}

void check_layout(const PlanRequest& r, const Layout& l) {
  const int64_t world = world_of(r), g = r.shape.gpus_per_node;
  auto n = [](int64_t v) { return std::to_string(v); };
  if (l.dp < 1 || l.pp < 1 || l.tp < 1 || l.dp * l.pp * l.tp != world)
    throw Error("dp " + n(l.dp) + " x pp " + n(l.pp) + " x tp " + n(l.tp) + " = " + n(l.dp * l.pp * l.tp) +
                " is not the cluster's " + n(world) + " GPUs (" + n(r.shape.nodes) + " node(s) x " + n(g) + ")");
  if (g % l.tp != 0)
    throw Error("tp " + n(l.tp) + " does not divide the " + n(g) +
                " GPUs of a node: a tensor-parallel group must stay inside a node");
  if ((l.tp > 1 || l.pp > 1) && !r.model)
    throw Error("tp " + n(l.tp) + " x pp " + n(l.pp) + " needs the model's shape (a preset): give --model");
  if (r.model) models::validate_tensor_parallel(*r.model, l.tp);
  if (l.sequence_parallel && l.tp < 2) throw Error("sequence parallelism needs tp > 1");
  if (l.ep < 1 || l.dp % l.ep != 0) throw Error("ep " + n(l.ep) + " does not divide dp " + n(l.dp));
  if (l.ep > 1) {
    if (!r.model || !r.model->is_moe()) throw Error("ep " + n(l.ep) + " needs a mixture-of-experts model (--model)");
    if (r.model->num_experts % l.ep != 0)
      throw Error("ep " + n(l.ep) + " does not divide the model's " + n(r.model->num_experts) + " experts");
  }
  if (l.cp < 1 || l.dp % l.cp != 0)
    throw Error("cp " + n(l.cp) + " does not divide dp " + n(l.dp) +
                ": context parallelism is cut from the data-parallel GPUs (world / (pp x tp))");
  if (l.cp > 1) {
    const ContextMethod m = context_method_of(l.cp, l.cp_ulysses);
    const std::string what = "cp " + n(l.cp) + " (" + context_method_name(m) +
                             (m == ContextMethod::hybrid ? ", Ulysses over " + n(l.cp_ulysses) : std::string()) + ")";
    if (!r.model) throw Error(what + " needs the model's shape (a preset): give --model");
    const std::string problem = context_parallel_problem(input_for(r, l));
    if (!problem.empty()) throw Error(what + ": " + problem);
  }
  const int64_t replicas = l.dp / std::max<int64_t>(1, l.cp);
  if (l.micro_batch < 1 || l.micro_batches < 1 || l.micro_batch * l.micro_batches * replicas != r.global_batch)
    throw Error("micro-batch " + n(l.micro_batch) + " x " + n(l.micro_batches) + " micro-batches x " +
                (l.cp > 1 ? n(replicas) + " data replicas (dp " + n(l.dp) + " / cp " + n(l.cp) + ")" : "dp " + n(l.dp)) +
                " is not the global batch of " + n(r.global_batch));
  if (l.zero_stage < 0 || l.zero_stage > 3) throw Error("ZeRO stage " + n(l.zero_stage) + " is not 0-3");
  if (l.offload_optimizer && l.zero_stage == 0) throw Error("optimizer offload needs ZeRO 1-3");
  if (l.offload_param && (l.zero_stage != 3 || !l.offload_optimizer))
    throw Error("parameter offload needs ZeRO-3 with the optimizer offloaded");
}

// FLOPs a token (forward and backward) of each layer of the stack, the whole
// model's (not a shard's): models/flops.h's count, split by layer.
std::vector<double> layer_flops(const PlanRequest& r) {
  if (!r.model) return {models::kTrainingFlopsPerParameter * static_cast<double>(r.shape.params)};
  EstimateInput whole = r.shape;
  whole.tensor_parallel = 1;
  set_model_shape(whole, *r.model);
  std::vector<double> out;
  const size_t n = whole.layer_weights.size();
  const double tied = static_cast<double>(whole.tied_embedding_params);
  // A mixture of experts' block multiplies by top_k of its experts.
  const models::ModelConfig& c = *r.model;
  const double idle_experts =
      c.is_moe() ? static_cast<double>((c.num_experts - c.top_k) * 3 * c.hidden * c.moe_ffn_hidden) : 0.0;
  for (size_t i = 0; i < n; ++i) {
    double p = static_cast<double>(whole.layer_weights[i].parameters);
    if (i == 0) p -= tied;          // a tied matrix is counted where it multiplies: at the head
    if (i + 1 == n) p += tied;
    const bool block = i >= 1 && i + 2 < n;
    if (block) p -= idle_experts;
    out.push_back(models::kTrainingFlopsPerParameter * p +
                  (block ? models::attention_training_flops(c.heads * c.head_dim(), whole.seq_len) : 0.0));
  }
  return out;
}

Shared shared_figures(const PlanRequest& r, const Layout& l) {
  const EstimateInput in = input_for(r, l);
  const Hardware& hw = r.hardware;
  const int64_t p = l.pp, v = l.virtual_stages, t = l.tp, g = r.shape.gpus_per_node;
  // s: the tokens of a sequence one GPU holds (its 1/cp part under context parallelism).
  const double w = static_cast<double>(in.param_bytes), b = static_cast<double>(l.micro_batch),
               s = static_cast<double>(in.seq_len) / static_cast<double>(l.cp), h = static_cast<double>(in.hidden);
  const double rate = hw.peak_flops * hw.mfu, tokens = b * s;
  const std::vector<double> flops = layer_flops(r);
  // A token's routed experts' training FLOPs in one mixture-of-experts block.
  const double expert_flops = r.model && r.model->is_moe()
                                  ? models::kTrainingFlopsPerParameter *
                                        static_cast<double>(r.model->top_k * 3 * r.model->hidden * r.model->moe_ffn_hidden)
                                  : 0.0;
  Shared out;
  for (double f : flops) out.flops_per_token += f;
  const size_t n_layers = flops.size();
  // Which layers each virtual stage runs (the engine's cut of the shards).
  pipeline::Partition cut;
  if (p * v > 1) {
    cut = pipeline::partition_layers(in.layer_weights, static_cast<int>(p * v), "parameters");
  } else {
    cut.bounds = {0, n_layers};
  }
  // A collective's time: a ring all-reduce moves 2(t-1)/t of the buffer at the bus bandwidth.
  const double unit = b * s * h * w;
  const double tp_all_reduce = t > 1 ? 2.0 * static_cast<double>(t - 1) / static_cast<double>(t) * unit / hw.node_bandwidth : 0.0;
  // Stage r's GPU k receives from k - dp·tp (stage 0 from the last stage's,
  // interleaved): over the network where the two are on different nodes.
  const int64_t block = l.dp * t;
  auto receive = [&](int64_t from_stage, int64_t to_stage) {
    if (p == 1) return 0.0;
    const bool crosses = r.shape.nodes > 1 && (from_stage * block) / g != (to_stage * block) / g;
    return unit / (l.sequence_parallel ? static_cast<double>(t) : 1.0) /
           (crosses ? hw.network_bandwidth : hw.node_bandwidth);
  };

  std::vector<StageEstimate> pipeline_stages;
  if (p > 1) pipeline_stages = estimate_pipeline_stages(in);
  // Expert parallelism's all-to-all, each way: half of it forward, half backward.
  const double a2a = all_to_all_bytes(in) / 2.0 / (l.ep <= g ? hw.node_bandwidth : hw.network_bandwidth);
  // Context parallelism, a block's: Ulysses not overlapped; each ring hop
  // hidden behind a ring step's attention (the block's forward attention on
  // this GPU over the ring's ranks) up to its length; the backward's hops not.
  double cp_fwd = 0, cp_bwd = 0;
  if (l.cp > 1) {
    const ContextTraffic ct = context_parallel_layer_bytes(in);
    const int64_t ring = l.cp / l.cp_ulysses;
    const double ring_bw = g % (t * l.cp) == 0 ? hw.node_bandwidth : hw.network_bandwidth;
    const double ulysses_bw = g % (t * l.cp_ulysses) == 0 ? hw.node_bandwidth : hw.network_bandwidth;
    const models::ModelConfig& c = *r.model;  // check_layout: context parallelism needs the model
    const double attention = tokens * models::attention_training_flops(c.heads * c.head_dim(), in.seq_len) / 3.0 /
                             static_cast<double>(t) / rate;
    const double hop = ring > 1 ? ct.ring_forward / static_cast<double>(ring - 1) / ring_bw : 0.0;
    cp_fwd = ct.ulysses_forward / ulysses_bw +
             static_cast<double>(ring - 1) * std::max(0.0, hop - attention / static_cast<double>(ring));
    cp_bwd = ct.ulysses_backward / ulysses_bw + ct.ring_backward / ring_bw + (l.checkpointing ? cp_fwd : 0.0);
  }

  std::vector<pipeline::Costs> costs;
  std::vector<double> compute_of, tp_of, p2p_of, cp_of, a2a_of;
  for (int64_t rank = 0; rank < p; ++rank) {
    double fwd = 0, recompute = 0, tp_fwd = 0, tp_bwd = 0, recv_f = 0, recv_b = 0, cp_f = 0, cp_b = 0;
    for (int64_t chunk = 0; chunk < v; ++chunk) {
      const int64_t part = chunk * p + rank;
      for (size_t i = cut.begin(static_cast<int>(part)); i < cut.end(static_cast<int>(part)); ++i) {
        const bool block = r.model && i >= 1 && i + 2 < n_layers;
        // A mixture of experts is replicated over tensor parallelism: without
        // sequence parallelism each GPU of the group runs every token's experts.
        const double repeated = block && !l.sequence_parallel ? expert_flops : 0.0;
        const double f = tokens * ((flops[i] - repeated) / static_cast<double>(t) + repeated) / 3.0 / rate;
        fwd += f;
        if (block && l.checkpointing) recompute += f;
        if (block) {
          // Two split regions a block (attention, MLP); a mixture of experts is
          // none (replicated), so its block has the attention's alone.
          const double regions = expert_flops > 0 ? 1.0 : 2.0;
          tp_fwd += regions * tp_all_reduce;
          tp_bwd += regions * tp_all_reduce * (l.sequence_parallel ? 1.5 : 1.0) +
                    (l.checkpointing ? regions * tp_all_reduce : 0.0);
          cp_f += cp_fwd;
          cp_b += cp_bwd;
        }
        if (r.model && i == 0) tp_fwd += tp_all_reduce;               // the vocabulary-parallel embedding
        if (r.model && i + 1 == n_layers) tp_bwd += tp_all_reduce;    // the head's input gradient
      }
      if (part > 0) recv_f += receive((part - 1) % p, rank);
      if (part < p * v - 1) recv_b += receive((part + 1) % p, rank);
    }
    StageFigures st;
    // Expert parallelism's exchanges: the stage's blocks' share of the model's.
    const double stage_a2a =
        p > 1 && in.layers > 0
            ? a2a * static_cast<double>(pipeline_stages[static_cast<size_t>(rank)].blocks) / static_cast<double>(in.layers)
            : a2a;
    a2a_of.push_back(stage_a2a);
    recv_f += stage_a2a;
    recv_b += stage_a2a * (l.checkpointing ? 2.0 : 1.0);  // a recomputed forward exchanges its tokens again
    st.forward = fwd + tp_fwd + recv_f + cp_f;
    st.backward = 2.0 * fwd + recompute + tp_bwd + recv_b + cp_b;
    const double dv = static_cast<double>(v);
    costs.push_back(pipeline::Costs{st.forward / dv, (fwd + recompute + tp_bwd + recv_b + cp_b) / dv, fwd / dv});
    compute_of.push_back(3.0 * fwd + recompute);
    tp_of.push_back(tp_fwd + tp_bwd);
    p2p_of.push_back(recv_f + recv_b);
    cp_of.push_back(cp_f + cp_b);
    // Memory.
    // A region's gathered input; context parallelism's exchange buffers.
    const double sp_gather = (l.sequence_parallel ? s * b * h * w : 0.0) + context_parallel_buffer_bytes(in);
    if (p > 1) {
      const StageEstimate& e = pipeline_stages[static_cast<size_t>(rank)];
      st.params = static_cast<double>(e.params);
      st.expert_params = static_cast<double>(e.expert_params);
      st.states = e.states;
      st.activations = e.activation_bytes;
      // The received activation and gradient of the chunk running.
      st.buffers = 2.0 * unit / (l.sequence_parallel ? static_cast<double>(t) : 1.0) + sp_gather;
    } else if (l.ep > 1) {
      st.expert_params = static_cast<double>(in.expert_params) / static_cast<double>(l.ep);
      st.params = expert_parallel_params(in);
      st.states = estimate_model_states(in);
      st.activations = estimate_activation_bytes(in);
      st.buffers = sp_gather;
    } else {
      st.params = static_cast<double>(t > 1 && in.tp_params > 0 ? in.tp_params : in.params);
      st.states = estimate_model_states(in);
      st.activations = estimate_activation_bytes(in);
      st.buffers = sp_gather;
    }
    out.stages.push_back(std::move(st));
  }
  const double m = static_cast<double>(l.micro_batches);
  size_t busiest = 0;
  if (p > 1) {
    const pipeline::Schedule schedule =
        pipeline::make_schedule(l.schedule, static_cast<int>(p), static_cast<int>(l.micro_batches), static_cast<int>(v));
    const pipeline::Simulation sim = pipeline::simulate(schedule, costs);
    for (size_t i = 1; i < sim.busy.size(); ++i)
      if (sim.busy[i] > sim.busy[busiest]) busiest = i;
    out.time.pipeline = sim.makespan;
    out.time.bubble = sim.makespan - sim.busy[busiest];
  } else {
    out.time.pipeline = m * (costs[0].forward + costs[0].backward());
  }
  out.time.compute = m * compute_of[busiest];
  out.time.tensor_parallel = m * tp_of[busiest];
  out.time.transfers = m * p2p_of[busiest];
  out.time.all_to_all = m * a2a_of[busiest] * (2.0 + (l.checkpointing ? 1.0 : 0.0));
  out.time.context_parallel = m * cp_of[busiest];
  return out;
}

LayoutEstimate finish(const PlanRequest& r, const Layout& l, const Shared& shared) {
  const Hardware& hw = r.hardware;
  const int64_t g = r.shape.gpus_per_node, t = l.tp;
  // ZeRO's group: the GPUs holding the same experts under expert parallelism.
  const int64_t d = l.dp / l.ep;
  const double w = static_cast<double>(r.shape.param_bytes);
  const double wire = r.shape.grad_bytes > 0 ? static_cast<double>(r.shape.grad_bytes) : d > 1 ? std::max(w, 4.0) : w;
  const double m = static_cast<double>(l.micro_batches), fd = static_cast<double>(d);
  const double dp_bw = r.shape.nodes > 1 && t * d > g ? hw.network_bandwidth : hw.node_bandwidth;
  LayoutEstimate e;
  e.layout = l;
  e.time = shared.time;
  std::vector<StateEstimate> rows;
  for (size_t stage = 0; stage < shared.stages.size(); ++stage) {
    const StageFigures& st = shared.stages[stage];
    StateEstimate row{};
    bool found = false;
    for (const auto& x : st.states)
      if (x.stage == l.zero_stage && x.offload_optimizer == l.offload_optimizer && x.offload_param == l.offload_param)
        row = x, found = true;
    if (!found) throw Error("no model-state estimate for " + describe(l));
    rows.push_back(row);
    const double total = row.gpu_bytes + st.activations + st.buffers;
    if (stage == 0 || total > e.gpu_bytes) {
      e.busiest_stage = static_cast<int>(stage);
      e.states = row.gpu_bytes, e.activations = st.activations, e.buffers = st.buffers, e.gpu_bytes = total;
    }
    // Data-parallel collectives of one GPU's shard (ring volumes) and what the compute does not hide.
    const double psi = st.params, f = d > 1 ? (fd - 1.0) / fd : 0.0;
    const double reduce_scatter = f * psi * wire / dp_bw, gather = f * psi * w / dp_bw;
    double exposed = 0;
    switch (l.zero_stage) {
      case 0: exposed = std::max(0.0, 2.0 * reduce_scatter - st.backward); break;
      case 1: exposed = std::max(0.0, reduce_scatter - st.backward) + gather; break;
      case 2: exposed = m * std::max(0.0, reduce_scatter - st.backward) + gather; break;
      default: exposed = m * std::max(0.0, 2.0 * gather + reduce_scatter - st.forward - st.backward); break;
    }
    if (l.ep > 1) {  // the stage's parameters outside the experts, summed over the expert-parallel GPUs at the step
      const double dense = st.params - st.expert_params;
      const double fe = static_cast<double>(l.ep);
      exposed += 2.0 * (fe - 1.0) / fe * dense * wire / (l.ep <= g ? hw.node_bandwidth : hw.network_bandwidth);
    }
    e.time.data_parallel = std::max(e.time.data_parallel, exposed);
    if (l.offload_optimizer) {
      const double shard = psi / fd;
      double off = shard * (4.0 + w) / hw.host_link_bandwidth + shard * static_cast<double>(g) / hw.host_updates_per_s;
      if (l.offload_param) off += m * 2.0 * shard * w / hw.host_link_bandwidth;
      e.time.offload = std::max(e.time.offload, off);
    }
  }
  // The host: GPU k holds stage k / (dp·tp); a node's host the offloaded
  // states of its GPUs, and under cpu_checkpointing their blocks' checkpointed inputs.
  const double host_checkpoints = estimate_host_checkpoint_bytes(input_for(r, l)) / static_cast<double>(l.pp);
  for (int64_t node = 0; node < r.shape.nodes; ++node) {
    double host = 0;
    for (int64_t k = node * g; k < (node + 1) * g; ++k)
      host += rows[static_cast<size_t>(k / (l.dp * t))].cpu_bytes_per_node / static_cast<double>(g) + host_checkpoints;
    e.host_bytes_per_node = std::max(e.host_bytes_per_node, host);
  }
  e.time.total = e.time.pipeline + e.time.data_parallel + e.time.offload;
  const double tokens = static_cast<double>(r.global_batch * r.shape.seq_len);
  e.tokens_per_s = tokens / e.time.total;
  e.mfu = tokens * shared.flops_per_token / e.time.total /
          (static_cast<double>(world_of(r)) * hw.peak_flops);
  const double usable = (1.0 - hw.memory_margin) * hw.gpu_memory;
  e.fits = e.gpu_bytes <= usable && (hw.host_memory <= 0 || e.host_bytes_per_node <= hw.host_memory);
  if (!e.fits) e.limit = e.gpu_bytes > usable ? "GPU memory" : "host memory";
  return e;
}

// Every ZeRO stage and offload choice the engine runs, at every schedule.
const std::vector<ZeroChoice>& zero_choices() {
  static const std::vector<ZeroChoice> all = {{0, false, false}, {1, false, false}, {1, true, false},
                                              {2, false, false}, {2, true, false},  {3, false, false},
                                              {3, true, false},  {3, true, true}};
  return all;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) out.push_back(i);
  return out;
}

template <class T>
bool allowed(const std::optional<T>& fixed, const T& value) {
  return !fixed || *fixed == value;
}

// The (cp, Ulysses size) pairs plan_layouts tries at `dp` data-parallel GPUs
// of tp-way shards (the rule in layout_planner.h); cp 1 first.
std::vector<std::pair<int64_t, int64_t>> context_choices(const PlanRequest& r, int64_t dp, int64_t tp, int64_t ep) {
  const LayoutChoices& fx = r.fixed;
  std::vector<std::pair<int64_t, int64_t>> out;
  if (allowed(fx.cp, int64_t{1}) && allowed(fx.cp_ulysses, int64_t{1})) out.push_back({1, 1});
  if (!context_parallel_searched(r) || !r.model) return out;
  const bool length_alone = !fx.cp && !fx.cp_method && !fx.cp_ulysses;
  EstimateInput in = r.shape;
  in.tensor_parallel = tp;
  in.sequence_parallel = false;
  set_model_shape(in, *r.model);
  for (int64_t cp : divisors(dp)) {
    if (cp == 1 || !allowed(fx.cp, cp) || (length_alone && r.shape.seq_len / cp < kContextMinTokens)) continue;
    std::vector<int64_t> hybrid;
    for (int64_t u : divisors(cp)) {
      const ContextMethod m = context_method_of(cp, u);
      if (!allowed(fx.cp_ulysses, u) || !allowed(fx.cp_method, m)) continue;
      in.context_parallel = cp, in.context_ulysses = u;
      if (!context_parallel_problem(in).empty()) continue;
      if (m == ContextMethod::hybrid) hybrid.push_back(u);
      else out.push_back({cp, u});
    }
    // Hybrid: the largest Ulysses size, unless hybrid or the size is asked for.
    if (!hybrid.empty() && !fx.cp_method && !fx.cp_ulysses) hybrid = {hybrid.back()};
    for (int64_t u : hybrid) out.push_back({cp, u});
  }
  return out;
}

}  // namespace

bool context_parallel_searched(const PlanRequest& r) {
  return r.fixed.cp || r.fixed.cp_method || r.fixed.cp_ulysses || r.shape.seq_len >= kContextSearchSeq;
}

LayoutEstimate estimate_layout(const PlanRequest& request, const Layout& layout) {
  check_layout(request, layout);
  return finish(request, layout, shared_figures(request, layout));
}

Plan plan_layouts(const PlanRequest& r) {
  if (r.global_batch < 1) throw Error("the plan needs the global batch (sequences a step): give --global-batch");
  const LayoutChoices& fx = r.fixed;
  const int64_t world = world_of(r), g = r.shape.gpus_per_node;
  // The embedding, the blocks, the final norm and the head: what a pipeline cuts.
  const int64_t layer_count = r.model ? r.model->layers + 3 : 1;
  Plan plan;
  using pipeline::ScheduleKind;
  for (int64_t tp : divisors(g)) {
    if (!allowed(fx.tp, tp) || (tp > 1 && !r.model)) continue;
    if (r.model) {
      try {
        models::validate_tensor_parallel(*r.model, tp);
      } catch (const std::exception&) {
        continue;  // the model's heads or widths do not split that way
      }
    }
    for (int64_t pp : divisors(world / tp)) {
      if (!allowed(fx.pp, pp) || (pp > 1 && !r.model) || pp > layer_count) continue;
      const int64_t dp = world / (tp * pp);
      const bool moe = r.model && r.model->is_moe();
      for (int64_t ep : divisors(dp)) {
      if (!allowed(fx.ep, ep) || (ep > 1 && (!moe || r.model->num_experts % ep != 0))) continue;
      for (const auto& [cp, ulysses] : context_choices(r, dp, tp, ep)) {
      // The data replicas: a context-parallel group reads one batch.
      if (r.global_batch % (dp / cp) != 0) continue;
      const int64_t per_rank = r.global_batch / (dp / cp);
      for (int64_t micro = 1; micro <= per_rank; micro *= 2) {
        if (per_rank % micro != 0 || !allowed(fx.micro_batch, micro) || !allowed(fx.micro_batches, per_rank / micro))
          continue;
        const int64_t m = per_rank / micro;
        std::vector<std::pair<ScheduleKind, int64_t>> schedules = {{ScheduleKind::one_f_one_b, 1}};
        if (pp > 1) {
          schedules = {{ScheduleKind::gpipe, 1}, {ScheduleKind::one_f_one_b, 1}, {ScheduleKind::zb_h1, 1}};
          const int64_t v = fx.virtual_stages.value_or(2);
          if (v >= 2 && m % pp == 0 && pp * v <= layer_count) schedules.push_back({ScheduleKind::interleaved, v});
        }
        for (const auto& [kind, v] : schedules) {
          if (pp > 1 && !allowed(fx.schedule, kind)) continue;
          if (pp > 1 && fx.virtual_stages && kind != ScheduleKind::interleaved && *fx.virtual_stages != 1) continue;
          for (bool ckpt : {false, true}) {
            if (!allowed(fx.checkpointing, ckpt)) continue;
            for (bool sp : {false, true}) {
              if ((sp && tp < 2) || !allowed(fx.sequence_parallel, sp)) continue;
              Layout l;
              l.dp = dp, l.pp = pp, l.tp = tp, l.ep = ep, l.sequence_parallel = sp;
              l.cp = cp, l.cp_ulysses = ulysses;
              l.micro_batch = micro, l.micro_batches = m, l.schedule = kind, l.virtual_stages = v;
              l.checkpointing = ckpt;
              // Sequence parallelism splits each GPU's part of the sequence again.
              if (sp && cp > 1 && (r.shape.seq_len / cp) % tp != 0) continue;
              check_layout(r, l);
              const Shared shared = shared_figures(r, l);
              for (const ZeroChoice& z : zero_choices()) {
                if (!allowed(fx.zero_stage, z.stage) || !allowed(fx.offload_optimizer, z.offload_optimizer) ||
                    !allowed(fx.offload_param, z.offload_param))
                  continue;
                l.zero_stage = z.stage, l.offload_optimizer = z.offload_optimizer, l.offload_param = z.offload_param;
                LayoutEstimate e = finish(r, l, shared);
                ++plan.considered;
                if (e.fits) {
                  plan.fitting.push_back(std::move(e));
                } else if (!plan.closest || e.gpu_bytes < plan.closest->gpu_bytes) {
                  plan.closest = std::move(e);
                }
              }
            }
          }
        }
      }
      }
      }
    }
  }
  if (plan.considered == 0)
    throw Error("no layout of " + std::to_string(world) + " GPUs has what is fixed (" +
                (fx.pp ? "pp " + std::to_string(*fx.pp) + " " : "") + (fx.tp ? "tp " + std::to_string(*fx.tp) + " " : "") +
                (fx.micro_batch ? "micro-batch " + std::to_string(*fx.micro_batch) + " " : "") +
                (fx.micro_batches ? "gradient_accumulation_steps " + std::to_string(*fx.micro_batches) + " " : "") +
                (fx.cp ? "cp " + std::to_string(*fx.cp) + " " : "") +
                (fx.cp_method ? std::string("method ") + context_method_name(*fx.cp_method) + " " : "") +
                (fx.cp_ulysses ? "Ulysses size " + std::to_string(*fx.cp_ulysses) + " " : "") +
                "global batch " + std::to_string(r.global_batch) +
                "): the batch must be micro-batch x accumulation x dp / cp, pp must divide the GPUs over tp, tp a "
                "node's GPUs, cp dp and the sequence (2 x cp with a ring), Ulysses the heads a tensor-parallel GPU "
                "holds");
  std::stable_sort(plan.fitting.begin(), plan.fitting.end(), [](const LayoutEstimate& a, const LayoutEstimate& b) {
    return a.time.total != b.time.total ? a.time.total < b.time.total : a.gpu_bytes < b.gpu_bytes;
  });
  return plan;
}

std::vector<FewestGpus> fewest_gpus_data_parallel(const PlanRequest& r, int64_t max_nodes) {
  EstimateInput in = r.shape;
  in.micro_batch = 1;
  in.activation_checkpointing = true;
  in.pipeline_stages = in.virtual_stages = in.micro_batches = 1;
  in.tensor_parallel = 1;
  in.sequence_parallel = false;
  in.context_parallel = in.context_ulysses = 1;
  if (r.model) set_model_shape(in, *r.model);
  const double usable = (1.0 - r.hardware.memory_margin) * r.hardware.gpu_memory;
  const double activations = estimate_activation_bytes(in);
  EstimateInput unbounded = in;
  unbounded.nodes = int64_t{1} << 40;
  const std::vector<StateEstimate> floors = estimate_model_states(unbounded);
  std::vector<FewestGpus> out;
  for (const StateEstimate& f : floors) {
    FewestGpus row;
    row.zero_stage = f.stage, row.offload_optimizer = f.offload_optimizer, row.offload_param = f.offload_param;
    row.floor_bytes = f.gpu_bytes + activations;
    for (int64_t nodes = 1; nodes <= max_nodes; ++nodes) {
      in.nodes = nodes;
      for (const StateEstimate& x : estimate_model_states(in)) {
        if (x.stage != f.stage || x.offload_optimizer != f.offload_optimizer || x.offload_param != f.offload_param)
          continue;
        const bool host_ok = r.hardware.host_memory <= 0 || x.cpu_bytes_per_node <= r.hardware.host_memory;
        if (x.gpu_bytes + activations <= usable && host_ok)
          row.gpus = nodes * in.gpus_per_node, row.gpu_bytes = x.gpu_bytes + activations,
          row.host_bytes_per_node = x.cpu_bytes_per_node;
      }
      if (row.gpus > 0 || row.floor_bytes > usable) break;  // found, or no count ever fits
    }
    out.push_back(row);
  }
  return out;
}

std::string format_plan(const PlanRequest& r, const Plan& plan, size_t rows) {
  const Hardware& hw = r.hardware;
  auto gib = [](double bytes) { return bytes / double(1ull << 30); };
  char line[512];
  std::string out;
  const std::string name = r.model ? r.model->name : "a model";
  std::snprintf(line, sizeof line,
                "Layouts for %s (%.4gB parameters) on %lld node(s) x %lld GPU(s), %s (%.0f GiB, %.0f TFLOP/s), "
                "seq %lld, global batch %lld, %s training%s\n",
                name.c_str(), r.shape.params / 1e9, (long long)r.shape.nodes, (long long)r.shape.gpus_per_node,
                hw.gpu.c_str(), gib(hw.gpu_memory), hw.peak_flops / 1e12, (long long)r.shape.seq_len,
                (long long)r.global_batch, r.shape.param_bytes == 2 ? "16-bit" : "fp32",
                r.shape.fp8 ? " (FP8 projections: their weight copies in the states; step times as bf16's)" : "");
  out += line;
  std::snprintf(line, sizeof line,
                "  fits: the busiest stage's GPUs within %.0f%% of %.0f GiB; host memory %s\n",
                100.0 * (1.0 - hw.memory_margin), gib(hw.gpu_memory),
                hw.host_memory > 0 ? (std::to_string(static_cast<long long>(gib(hw.host_memory))) + " GiB a node").c_str()
                                   : "not checked (give --host-memory)");
  out += line;
  std::snprintf(line, sizeof line,
                "  step time: model FLOPs at %.0f%% MFU; collectives at %.0f GB/s in a node, %.0f GB/s a GPU across "
                "nodes; host link %.0f GB/s; host optimizer %.3g updates/s a node\n",
                100.0 * hw.mfu, hw.node_bandwidth / 1e9, hw.network_bandwidth / 1e9, hw.host_link_bandwidth / 1e9,
                hw.host_updates_per_s);
  out += line;
  if (!r.model) out += "  (parameters only: data parallelism alone, activations not counted; give --model for the shape)\n";
  if (context_parallel_searched(r)) {
    std::snprintf(line, sizeof line,
                  "  context parallelism (cp: each sequence over cp of the dp GPUs, dp / cp data replicas) searched%s\n",
                  r.fixed.cp || r.fixed.cp_method || r.fixed.cp_ulysses
                      ? " as fixed"
                      : (" at sizes leaving a GPU " + std::to_string(kContextMinTokens) + " tokens or more").c_str());
    out += line;
  } else if (r.model && !r.model->is_moe()) {
    std::snprintf(line, sizeof line,
                  "  context parallelism not searched (seq %lld < %lld; fix it with --cp or --cp-method)\n",
                  (long long)r.shape.seq_len, (long long)kContextSearchSeq);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %lld layouts considered, %zu fit", (long long)plan.considered,
                plan.fitting.size());
  out += line;
  if (plan.fitting.empty()) {
    out += ".\n";
    if (plan.closest) {
      std::snprintf(line, sizeof line, "  none fits; the least memory: %s at %.2f GiB a GPU (%s)\n",
                    describe(plan.closest->layout).c_str(), gib(plan.closest->gpu_bytes), plan.closest->limit.c_str());
      out += line;
    }
  } else {
    std::snprintf(line, sizeof line, "; the %zu fastest (GiB a GPU at the busiest stage; seconds a step):\n",
                  std::min(rows, plan.fitting.size()));
    out += line;
    out += "     #    dp   pp   tp   ep  cp       sp  ZeRO  offload  micro x acc  schedule        ckpt  states  activ  "
           "buffers   total  host/node    step  bubble  tp comm  a2a      cp comm  dp comm  offload   MFU  tokens/s\n";
    for (size_t i = 0; i < std::min(rows, plan.fitting.size()); ++i) {
      const LayoutEstimate& e = plan.fitting[i];
      const Layout& l = e.layout;
      std::string schedule = l.pp > 1 ? config::pipeline_schedule_name(l.schedule) : "-";
      if (l.virtual_stages > 1) schedule += " x" + std::to_string(l.virtual_stages);
      const std::string micro = std::to_string(l.micro_batch) + " x " + std::to_string(l.micro_batches);
      std::snprintf(line, sizeof line,
                    "  %4zu  %4lld %4lld %4lld %4lld  %-7s  %-3s %4d  %-7s  %-11s  %-14s  %-4s %7.2f %6.2f %8.2f %7.2f "
                    "%10.1f %7.3f %7.3f %8.3f %8.3f %8.3f %8.3f %8.3f %4.0f%% %9.4g\n",
                    i + 1, (long long)l.dp, (long long)l.pp, (long long)l.tp, (long long)l.ep,
                    describe_context(l).c_str(), l.sequence_parallel ? "on" : "-",
                    l.zero_stage, l.offload_param ? "opt+par" : l.offload_optimizer ? "opt" : "-", micro.c_str(),
                    schedule.c_str(), l.checkpointing ? "on" : "-", gib(e.states), gib(e.activations), gib(e.buffers),
                    gib(e.gpu_bytes), gib(e.host_bytes_per_node), e.time.total, e.time.bubble,
                    e.time.tensor_parallel, e.time.all_to_all, e.time.context_parallel, e.time.data_parallel,
                    e.time.offload, 100.0 * e.mfu,
                    e.tokens_per_s);
      out += line;
    }
  }
  out += "  data parallelism alone (pp = tp = 1, micro-batch 1, checkpointing): the fewest GPUs that fit "
         "(none: no count up to 1024 nodes)\n";
  out += "  ZeRO  offload  fewest GPUs  GiB a GPU there  host GiB a node there  floor GiB (GPUs -> inf)\n";
  for (const FewestGpus& f : fewest_gpus_data_parallel(r, 1024)) {
    char there[32] = "-", host[32] = "-";
    if (f.gpus > 0) std::snprintf(there, sizeof there, "%.2f", gib(f.gpu_bytes));
    if (f.gpus > 0) std::snprintf(host, sizeof host, "%.1f", gib(f.host_bytes_per_node));
    const std::string gpus = f.gpus > 0 ? std::to_string(f.gpus) : "none";
    std::snprintf(line, sizeof line, "  %4d  %-7s  %11s  %15s  %21s  %25.2f\n", f.zero_stage,
                  f.offload_param ? "opt+par" : f.offload_optimizer ? "opt" : "-", gpus.c_str(), there, host,
                  gib(f.floor_bytes));
    out += line;
  }
  return out;
}

}  // namespace stratum::planning
