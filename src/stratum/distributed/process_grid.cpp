#include "stratum/distributed/process_grid.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "stratum/config/config.h"
#include "stratum/core/error.h"
#include "stratum/core/log.h"
#include "stratum/distributed/comms_logger.h"
#include "stratum/distributed/init.h"

namespace stratum::distributed {
namespace {

std::string s(int64_t v) { return std::to_string(v); }

std::string join(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + s(v[i]);
  return out + "]";
}

// The first tensor-parallel group not inside one block of `node` consecutive
// ranks (empty: none). A group is evenly spaced, so its ends decide.
std::vector<int64_t> group_across_nodes(const Topology& t, int64_t node) {
  for (const auto& g : t.groups(Axis::tp))
    if (g.front() / node != g.back() / node) return g;
  return {};
}

}  // namespace

std::vector<std::string> ProcessGrid::problems(const Config& config, int world_size, int fewest_ranks_per_node) {
  if (world_size < 1 || fewest_ranks_per_node < 1)
    throw Error("process grid: a job of " + s(world_size) + " ranks whose smallest node runs " +
                s(fewest_ranks_per_node) + " of them; both must be at least 1");
  const int64_t world = world_size, fewest = fewest_ranks_per_node;
  const int64_t p = config.pipeline.stages, t = config.tensor_parallel.size;
  std::vector<std::string> out;
  // config/ reads both as >= 1; a Config built in code may not be.
  if (p < 1) out.push_back("pipeline.stages: " + s(p) + "; use at least 1");
  if (t < 1) out.push_back("tensor_parallel.autotp_size: " + s(t) + "; use 1 (off) or more");
  if (!out.empty()) return out;

  bool shape_fits = false;
  if (world % p != 0) {
    out.push_back("pipeline.stages: " + s(p) + " stages do not divide the " + s(world) +
                  " ranks of the job; use a divisor of " + s(world));
  } else if ((world / p) % t != 0) {
    if (p == 1)
      out.push_back("tensor_parallel.autotp_size: " + s(t) + " does not divide the " + s(world) +
                    " ranks of the job; use a divisor of " + s(world));
    else
      out.push_back("pipeline.stages: " + s(p) + " stages x tensor_parallel.autotp_size " + s(t) + " = " +
                    s(p * t) + " do not divide the " + s(world) + " ranks of the job; with " + s(p) +
                    " stages use a tensor-parallel size dividing " + s(world / p));
  } else {
    shape_fits = true;
  }

  // A tensor-parallel group's collectives are on every layer's path: it stays
  // inside a node, and the node with the fewest ranks decides.
  if (t > 1 && fewest < world) {
    if (fewest % t != 0) {
      out.push_back("tensor_parallel.autotp_size: " + s(t) + " does not divide the " + s(fewest) +
                    " ranks of a node (the fewest any node of the " + s(world) +
                    "-rank job runs): a tensor-parallel group would span nodes; use a divisor of " + s(fewest));
    } else if (shape_fits) {
      // tp fastest keeps a group on consecutive ranks; another order may spread it.
      try {
        const Topology topology = Topology::from_model_parallel(world, p, t, config.topology.order);
        const std::vector<int64_t> g = group_across_nodes(topology, fewest);
        if (!g.empty())
          out.push_back("topology.order: \"" + config.topology.order + "\" puts the tensor-parallel group " +
                        join(g) + " on ranks " + s(g[1] - g[0]) + " apart, across nodes of " + s(fewest) +
                        " ranks (the fewest any node of the " + s(world) + "-rank job runs); put tp first "
                        "(\"tp-dp-pp\") so that each tensor-parallel group is consecutive ranks of one node");
      } catch (const Error&) {
        // An order that is not a permutation of tp, dp, pp is config/'s to report.
      }
    }
  }

  const int64_t ep = config.moe.expert_parallel_size;
  if (ep > 1 && shape_fits && (world / (p * t)) % ep != 0)
    out.push_back("moe.expert_parallel_size: " + s(ep) + " does not divide the " + s(world / (p * t)) +
                  " data-parallel ranks (" + s(world) + " ranks / " + s(p) + " stages / " + s(t) +
                  " tensor-parallel); expert parallelism is cut from data parallelism: use a divisor of " +
                  s(world / (p * t)));
  const int64_t cp = config.context_parallel.size;
  if (cp > 1 && shape_fits && (world / (p * t)) % cp != 0)
    out.push_back("context_parallel.size: " + s(cp) + " does not divide the " + s(world / (p * t)) +
                  " data-parallel ranks (" + s(world) + " ranks / " + s(p) + " stages / " + s(t) +
                  " tensor-parallel); context parallelism is cut from data parallelism: use a divisor of " +
                  s(world / (p * t)) + ", or " + s(cp * p * t) + " x n ranks");
  if (config.pipeline.virtual_stages > 1 && p == 1)
    out.push_back("pipeline.virtual_stages: " + s(config.pipeline.virtual_stages) +
                  " virtual stages interleave chunks over several pipeline stages, but pipeline.stages is 1; "
                  "use pipeline.stages of 2 or more, or virtual_stages 1");
  return out;
}

ProcessGrid::Groups ProcessGrid::leader_groups(const Topology& topology, int64_t ep) {
  Groups groups(1);
  for (int64_t r = 0; r < topology.world_size(); ++r)
    if (topology.coord_of(r).dp < ep) groups[0].push_back(r);
    else groups.push_back({r});
  std::sort(groups[0].begin(), groups[0].end(), [&](int64_t a, int64_t b) {
    const Coord ca = topology.coord_of(a), cb = topology.coord_of(b);
    return ca.pp != cb.pp ? ca.pp < cb.pp : ca.tp != cb.tp ? ca.tp < cb.tp : ca.dp < cb.dp;
  });
  return groups;
}

ProcessGrid::Groups ProcessGrid::tied_groups(const Topology& topology, bool whole_gradients, int64_t ep) {
  const int64_t n = topology.world_size();
  Groups groups;
  std::vector<bool> placed(static_cast<size_t>(n), false);
  if (topology.pp() > 1) {
    std::map<int64_t, std::vector<int64_t>> by_tp;  // partitioned: one group per tp index
    for (const auto& pipeline : topology.groups(Axis::pp)) {  // one per (dp, tp) index, in stage order
      const int64_t first = pipeline.front(), last = pipeline.back();
      placed[static_cast<size_t>(first)] = placed[static_cast<size_t>(last)] = true;
      if (whole_gradients) {
        groups.push_back({first, last});
      } else {
        const Coord c = topology.coord_of(first);
        auto& all = by_tp[c.tp * ep + c.dp % ep];
        all.push_back(first);
        all.push_back(last);
      }
    }
    // By rank: the lowest rank of a tp index has pp = 0, so the first member holds stage 0.
    for (auto& [tp, all] : by_tp) {
      std::sort(all.begin(), all.end());
      groups.push_back(std::move(all));
    }
  }
  for (int64_t r = 0; r < n; ++r)
    if (!placed[static_cast<size_t>(r)]) groups.push_back({r});
  std::sort(groups.begin(), groups.end());
  return groups;
}

namespace {
// Each data-parallel group, ordered by dp index.
ProcessGrid::Groups dp_groups_in_order(const Topology& t) {
  ProcessGrid::Groups groups = t.groups(Axis::dp);
  for (auto& g : groups)
    std::sort(g.begin(), g.end(), [&](int64_t a, int64_t b) { return t.coord_of(a).dp < t.coord_of(b).dp; });
  return groups;
}
}  // namespace

ProcessGrid::Groups ProcessGrid::expert_groups(const Topology& t, int64_t ep) {
  Groups out;
  for (const auto& g : dp_groups_in_order(t))
    for (size_t i = 0; i < g.size(); i += static_cast<size_t>(ep)) out.emplace_back(g.begin() + i, g.begin() + i + ep);
  std::sort(out.begin(), out.end());
  return out;
}

ProcessGrid::Groups ProcessGrid::expert_data_groups(const Topology& t, int64_t ep) {
  Groups out;
  for (const auto& g : dp_groups_in_order(t))
    for (int64_t j = 0; j < ep; ++j) {
      std::vector<int64_t> same_place;
      for (size_t i = static_cast<size_t>(j); i < g.size(); i += static_cast<size_t>(ep)) same_place.push_back(g[i]);
      out.push_back(std::move(same_place));
    }
  std::sort(out.begin(), out.end());
  return out;
}

ProcessGrid::Groups ProcessGrid::context_ring_groups(const Topology& t, int64_t cp, int64_t ulysses) {
  Groups out;
  for (const auto& block : expert_groups(t, cp))
    for (int64_t j = 0; j < ulysses; ++j) {
      std::vector<int64_t> ring;
      for (size_t i = static_cast<size_t>(j); i < block.size(); i += static_cast<size_t>(ulysses)) ring.push_back(block[i]);
      out.push_back(std::move(ring));
    }
  std::sort(out.begin(), out.end());
  return out;
}

std::string ProcessGrid::summary(const Topology& t) {
  return s(t.world_size()) + (t.world_size() == 1 ? " rank: " : " ranks: ") + s(t.dp()) + " data-parallel x " +
         s(t.pp()) + (t.pp() == 1 ? " pipeline stage x " : " pipeline stages x ") + s(t.tp()) +
         " tensor-parallel, order " + t.order();
}

ProcessGrid::ProcessGrid(Topology topology, int64_t rank, int fewest_ranks_per_node, int zero_stage)
    : topology_(std::move(topology)),
      coord_(topology_.coord_of(rank)),
      rank_(rank),
      fewest_ranks_per_node_(fewest_ranks_per_node),
      zero_stage_(zero_stage) {}

ProcessGrid ProcessGrid::create(const Config& config, const DistContext& ctx) {
  if (!ctx.cpu_world) throw Error("process grid: the DistContext has no CPU world; make it with distributed::init()");
  const std::shared_ptr<Communicator>& world = ctx.device_world();
  if (world->size() != ctx.cpu_world->size())
    throw Error("process grid: rank " + s(ctx.cpu_world->rank()) + ": the device world has " + s(world->size()) +
                " ranks but the CPU world " + s(ctx.cpu_world->size()));
  // The same number on every rank, so that every rank finds the same problems.
  at::Tensor local = at::full({1}, static_cast<int64_t>(ctx.local_world_size), at::kLong);
  ctx.cpu_world->all_reduce(local, ReduceOp::min)->wait();
  const int fewest = static_cast<int>(local.item<int64_t>());
  const std::vector<std::string> found = problems(config, world->size(), fewest);
  if (!found.empty()) throw ConfigError(config.source, found);

  ProcessGrid g(Topology::from_model_parallel(world->size(), config.pipeline.stages, config.tensor_parallel.size,
                                              config.topology.order),
                world->rank(), fewest, static_cast<int>(config.zero_optimization.stage));
  const Topology& t = g.topology_;
  if (ctx.device().is_cuda()) g.cuda_device_ = ctx.device().index();
  // Every job states its grid once, at start, so a user can check placement
  // (the programs print it at info level, with hosts and GPUs).
  if (world->rank() == 0) log::debug(g.summary() + "\n" + t.table());

  // Splits are collective: every rank makes the same ones, in the same order.
  g.world_ = world;
  g.dp_ = world->split(t.groups(Axis::dp), "dp");
  g.pp_ = world->split(t.groups(Axis::pp), "pp");
  g.tp_ = world->split(t.groups(Axis::tp), "tp");
  g.dp_tp_ = world->split(t.dp_tp_groups(), "dp_tp");
  g.ep_size_ = config.moe.expert_parallel_size;
  if (t.pp() > 1) g.tied_ = world->split(tied_groups(t, g.zero_stage_ == 0, g.ep_size_), "tied");
  if (g.ep_size_ > 1) {
    g.ep_ = world->split(expert_groups(t, g.ep_size_), "ep");
    g.edp_ = world->split(expert_data_groups(t, g.ep_size_), "edp");
  }

  g.cp_size_ = config.context_parallel.size;
  if (g.cp_size_ > 1) {
    // One communicator a group: a method with one part uses the whole group
    // for it and has none for the other (an unused one costs NCCL a stream
    // and a thread); hybrid splits both.
    const int64_t ulysses = config.context_parallel.ulysses_size;
    g.cp_ = world->split(expert_groups(t, g.cp_size_), "cp");
    if (ulysses == g.cp_size_) g.cp_ulysses_ = g.cp_;
    else if (ulysses > 1) g.cp_ulysses_ = world->split(expert_groups(t, ulysses), "cp_ulysses");
    if (ulysses == 1) g.cp_ring_ = g.cp_;
    else if (ulysses < g.cp_size_) g.cp_ring_ = world->split(context_ring_groups(t, g.cp_size_, ulysses), "cp_ring");
  }

  g.cpu_world_ = ctx.cpu_world;
  if (world.get() == ctx.cpu_world.get()) {
    g.cpu_dp_ = g.dp_;
    g.cpu_pp_ = g.pp_;
    g.cpu_tp_ = g.tp_;
    g.cpu_edp_ = g.edp_;
  } else {
    g.cpu_dp_ = ctx.cpu_world->split(t.groups(Axis::dp), "dp_control");
    g.cpu_pp_ = ctx.cpu_world->split(t.groups(Axis::pp), "pp_control");
    g.cpu_tp_ = ctx.cpu_world->split(t.groups(Axis::tp), "tp_control");
    if (g.ep_size_ > 1) g.cpu_edp_ = ctx.cpu_world->split(expert_data_groups(t, g.ep_size_), "edp_control");
  }
  auto leaders = ctx.cpu_world->split(leader_groups(t, g.ep_size_), "leaders");
  if (g.coord_.dp < g.ep_size_) g.leaders_ = std::move(leaders);
  if (config.comms_logger.enabled || config.comms_logger.debug) g.comms_log_ = std::make_shared<CommsLog>();
  return g;
}

const std::shared_ptr<Communicator>& ProcessGrid::tied(bool whole_gradients) const {
  auto variant = [&](bool whole) {
    return whole ? std::string("whole gradients (stage 0 and stage ") + s(pp() - 1) + " of each pipeline paired)"
                 : std::string("partitioned gradients (every stage-0 and stage-") + s(pp() - 1) +
                       " rank of a tensor-parallel index together)";
  };
  if (tied_ && whole_gradients != (zero_stage_ == 0))
    throw Error("process grid: rank " + s(rank_) + ": the tied embedding's group was built for " +
                variant(zero_stage_ == 0) + ", as zero_optimization.stage " + s(zero_stage_) + " needs, not for " +
                variant(whole_gradients));
  return tied_;
}

}  // namespace stratum::distributed
