#include "stratum/engine/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/log.h"
#include "stratum/io/safetensors.h"
#include "stratum/optim/adam.h"
#include "stratum/optim/loss_scaler.h"
#include "stratum/optim/lr_schedule.h"

namespace stratum {

using nlohmann::json;

namespace {

constexpr const char* kFormat = "stratum-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kConsolidatedWeights = "model_16bit.safetensors";
const char* kKinds[] = {"master", "exp_avg", "exp_avg_sq"};

std::string shard_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

std::string fragment_name(const std::string& kind, const std::string& param, int64_t start) {
  return kind + "|" + param + "|" + std::to_string(start);
}

struct FragmentName {
  std::string kind, param;
  int64_t start = 0;
};
std::optional<FragmentName> parse_fragment(const std::string& name) {
  const size_t a = name.find('|'), b = name.rfind('|');
  if (a == std::string::npos || b == a) return std::nullopt;
  FragmentName f{name.substr(0, a), name.substr(a + 1, b - a - 1), 0};
  try {
    f.start = std::stoll(name.substr(b + 1));
  } catch (...) {
    return std::nullopt;
  }
  return f;
}

// A run of one parameter's elements inside a run of this rank's segment.
struct Fragment {
  int param;
  int64_t start;  // first element within the parameter
  int64_t numel;
  int segment;
  int64_t segment_offset;
};

// The parameter fragments a set of flat pieces covers, optionally clipped to [lo, hi) of the flat buffer.
std::vector<Fragment> fragments_of(const zero::FlatLayout& layout, const std::vector<zero::FlatPiece>& pieces,
                                   int64_t lo, int64_t hi) {
  std::vector<Fragment> out;
  for (const auto& piece : pieces) {
    const int64_t p0 = std::max(piece.flat_offset, lo), p1 = std::min(piece.flat_offset + piece.numel, hi);
    if (p0 >= p1) continue;
    for (size_t i = 0; i < layout.params().size(); ++i) {
      const zero::ParamSlot& slot = layout.params()[i];
      const int64_t s0 = std::max(slot.offset, p0), s1 = std::min(slot.offset + slot.numel, p1);
      if (s0 >= s1) continue;
      out.push_back(Fragment{static_cast<int>(i), s0 - slot.offset, s1 - s0, piece.segment,
                             piece.segment_offset + (s0 - piece.flat_offset)});
    }
  }
  return out;
}

// The flat pieces rank r holds at `stage` (what owned_pieces() returns on that
// rank), and the part of them it writes: for the manifest, written by rank 0.
std::vector<zero::FlatPiece> pieces_of_rank(const zero::FlatLayout& layout, int stage, int rank) {
  if (stage == 0) return {zero::FlatPiece{0, layout.total_numel(), 0, 0}};
  return layout.rank_pieces(rank, /*segment_per_bucket=*/false);
}

std::pair<int64_t, int64_t> write_window(const zero::FlatLayout& layout, int stage, int rank) {
  const int64_t total = layout.total_numel(), n = layout.dp_size();
  // Stage 0 holds everything on every rank: each writes an even share.
  if (stage == 0) return {total * rank / n, total * (rank + 1) / n};
  return {0, total};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_manifest(const std::string& tag_dir) {
  const std::string path = tag_dir + "/manifest.json";
  if (!fs::exists(path)) throw Error(tag_dir + ": not a checkpoint (no manifest.json)");
  json m;
  try {
    m = json::parse(read_text(path));
  } catch (const json::parse_error& e) {
    throw Error(path + ": corrupt manifest: " + e.what());
  }
  if (m.value("format", "") != kFormat) throw Error(path + ": not a Stratum checkpoint manifest");
  if (m.value("version", 0) != kVersion)
    throw Error(path + ": checkpoint format version " + std::to_string(m.value("version", 0)) + ", this build reads " +
                std::to_string(kVersion));
  return m;
}

// Every rank agrees on an error before anyone throws, so no rank hangs in the next collective.
void agree_or_throw(EngineCore& e, const std::string& local_error) {
  // On the gradients' device, where the communicator works (with offload the masters are on the host).
  const c10::Device device = e.strategy().segments().front().grad.device();
  at::Tensor flag = at::full({1}, local_error.empty() ? 0 : 1, at::TensorOptions().dtype(at::kFloat).device(device));
  e.dp()->all_reduce(flag, distributed::ReduceOp::max)->wait();
  if (flag.item<float>() > 0)
    throw Error(local_error.empty() ? "checkpoint: another rank failed (see its message)" : local_error);
}

}  // namespace

std::optional<std::string> latest_checkpoint_tag(const std::string& dir) {
  const std::string path = dir + "/latest";
  if (!fs::exists(path)) return std::nullopt;
  std::string tag = read_text(path);
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
  if (tag.empty()) return std::nullopt;
  return tag;
}

void save_checkpoint(EngineCore& engine, const std::string& save_dir, const std::string& tag,
                     const json& client_state, const CheckpointSaveOptions& options) {
  const TrainingState state = engine.training_state();
  auto& strategy = state.strategy;
  auto& adam = state.adam;
  const auto& layout = strategy.layout();
  const int rank = engine.dp()->rank(), n = engine.dp()->size();
  const std::string tmp_dir = save_dir + "/" + tag + ".tmp";
  std::string error;
  try {
    if (rank == 0) {
      fs::make_directories(save_dir);
      fs::remove_tree(tmp_dir);  // a save that was killed earlier
      fs::make_directories(tmp_dir);
    }
  } catch (const Error& e) {
    error = e.what();
  }
  agree_or_throw(engine, error);

  const auto [lo, hi] = write_window(layout, strategy.stage(), rank);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const Fragment& f : fragments_of(layout, strategy.owned_pieces(), lo, hi)) {
    const auto& seg = strategy.segments()[f.segment];
    const std::string& name = layout.specs()[f.param].name;
    const at::Tensor* sources[] = {&seg.master, &adam[f.segment].exp_avg, &adam[f.segment].exp_avg_sq};
    for (int k = 0; k < 3; ++k)
      tensors.emplace_back(fragment_name(kKinds[k], name, f.start),
                           sources[k]->narrow(0, f.segment_offset, f.numel).to(at::kCPU));
  }
  tensors.emplace_back("rng|cpu", at::detail::getDefaultCPUGenerator().get_state());
  try {
    io::write_safetensors(tmp_dir + "/" + shard_name(rank), tensors,
                              {{"format", kFormat}, {"rank", std::to_string(rank)}});
  } catch (const Error& e) {
    error = e.what();
  }
  agree_or_throw(engine, error);

  // stage3_gather_16bit_weights_on_model_save: the whole model in the training
  // dtype under its parameter names, one file, gathered a layer at a time.
  if (state.gather_16bit_weights_on_save) {
    std::vector<std::pair<std::string, at::Tensor>> weights;
    strategy.for_each_full_param([&](int i, const at::Tensor& v) {
      if (rank == 0) weights.emplace_back(layout.specs()[i].name, v.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
    });
    try {
      if (rank == 0) io::write_safetensors(tmp_dir + "/" + kConsolidatedWeights, weights, {{"format", "pt"}});
    } catch (const Error& e) {
      error = e.what();
    }
    agree_or_throw(engine, error);
  }

  if (options.before_publish) options.before_publish(tmp_dir);

  if (rank == 0) {
    json m;
    m["format"] = kFormat;
    m["version"] = kVersion;
    m["tag"] = tag;
    m["global_steps"] = engine.global_steps();
    m["micro_steps"] = engine.micro_steps();
    m["skipped_steps"] = engine.skipped_steps();
    m["zero_stage"] = strategy.stage();
    m["data_parallel_size"] = n;
    m["model_dtype"] = c10::toString(engine.model_dtype());
    json params = json::array();
    for (size_t i = 0; i < layout.params().size(); ++i)
      params.push_back({{"name", layout.specs()[i].name},
                        {"shape", layout.specs()[i].shape},
                        {"numel", layout.params()[i].numel}});
    m["params"] = params;
    // Each shard's contents: [parameter index, first element, elements] per fragment.
    json shards = json::array();
    for (int r = 0; r < n; ++r) {
      const auto [rlo, rhi] = write_window(layout, strategy.stage(), r);
      json fragments = json::array();
      for (const Fragment& f : fragments_of(layout, pieces_of_rank(layout, strategy.stage(), r), rlo, rhi))
        fragments.push_back({f.param, f.start, f.numel});
      shards.push_back({{"file", shard_name(r)}, {"rank", r}, {"fragments", fragments}});
    }
    m["shards"] = shards;
    m["topology"] = {{"data_parallel", n}, {"pipeline_parallel", 1}, {"tensor_parallel", 1}};
    m["rng"] = "per rank, in each shard as tensor 'rng|cpu' (torch's CPU generator state)";
    m["adam_step"] = adam.empty() ? 0.0 : adam.front().step.item<double>();
    m["lr_scheduler"] = {{"last_batch_iteration", state.scheduler.last_batch_iteration()}};
    const auto& sc = state.scaler.state();
    m["loss_scaler"] = {{"cur_scale", sc.cur_scale},
                        {"cur_iter", sc.cur_iter},
                        {"last_overflow_iter", sc.last_overflow_iter},
                        {"cur_hysteresis", sc.cur_hysteresis},
                        {"overflows_at_min", sc.overflows_at_min}};
    m["client_state"] = client_state;
    try {
      fs::write_file_atomically(tmp_dir + "/manifest.json", m.dump(2), "the checkpoint manifest");
      const std::string final_dir = save_dir + "/" + tag;
      fs::remove_tree(final_dir);  // re-saving the same tag replaces it
      if (std::rename(tmp_dir.c_str(), final_dir.c_str()) != 0)
        throw Error(final_dir + ": cannot rename " + tmp_dir + " into place");
      // Last: the new checkpoint is complete.
      fs::write_file_atomically(save_dir + "/latest", tag + "\n", "the latest tag");
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_or_throw(engine, error);
  if (rank == 0) log::debug("saved checkpoint " + save_dir + "/" + tag);
}

namespace {

// Where the saved fragments of one parameter are.
struct SavedFragment {
  std::string file, tensor;
  int64_t start, numel;
};
using FragmentIndex = std::map<std::string, std::map<std::string, std::vector<SavedFragment>>>;  // kind -> param -> list

FragmentIndex index_shards(const std::string& tag_dir, const json& manifest) {
  FragmentIndex index;
  for (const auto& shard : manifest.at("shards")) {
    const std::string file = tag_dir + "/" + shard.at("file").get<std::string>();
    if (!fs::exists(file)) throw Error(file + ": shard missing from the checkpoint");
    for (const auto& entry : io::read_safetensors_header(file).tensors) {
      auto f = parse_fragment(entry.name);
      if (!f || f->kind == "rng") continue;
      int64_t numel = 1;
      for (int64_t d : entry.shape) numel *= d;
      index[f->kind][f->param].push_back(SavedFragment{file, entry.name, f->start, numel});
    }
  }
  return index;
}

void check_model_matches(const json& manifest, const zero::FlatLayout& layout, const std::string& where) {
  std::map<std::string, std::vector<int64_t>> saved;
  for (const auto& p : manifest.at("params")) saved[p.at("name")] = p.at("shape").get<std::vector<int64_t>>();
  std::vector<std::string> problems;
  std::map<std::string, bool> seen;
  auto shape_str = [](const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  };
  for (const auto& spec : layout.specs()) {
    auto it = saved.find(spec.name);
    if (it == saved.end()) problems.push_back("parameter '" + spec.name + "' of the model is not in the checkpoint");
    else if (it->second != spec.shape)
      problems.push_back("parameter '" + spec.name + "': checkpoint shape " + shape_str(it->second) + ", model shape " +
                         shape_str(spec.shape));
    seen[spec.name] = true;
  }
  for (const auto& [name, shape] : saved)
    if (!seen.count(name)) problems.push_back("checkpoint parameter '" + name + "' is not in the model");
  if (!problems.empty()) {
    std::string msg = where + ": checkpoint does not match the model (wrong model or preset?):";
    for (size_t i = 0; i < problems.size() && i < 10; ++i) msg += "\n  " + problems[i];
    if (problems.size() > 10) msg += "\n  ... and " + std::to_string(problems.size() - 10) + " more";
    throw Error(msg);
  }
}

// Copies the saved elements [start, start + numel) of `param` (kind) into `dest`.
void fill_range(const FragmentIndex& index, const std::string& kind, const std::string& param, int64_t start,
                int64_t numel, at::Tensor dest, std::map<std::string, std::map<std::string, at::Tensor>>& cache) {
  int64_t covered = 0;
  auto kit = index.find(kind);
  if (kit != index.end()) {
    auto pit = kit->second.find(param);
    if (pit != kit->second.end())
      for (const SavedFragment& f : pit->second) {
        const int64_t a = std::max(start, f.start), b = std::min(start + numel, f.start + f.numel);
        if (a >= b) continue;
        auto& file_cache = cache[f.file];
        auto t = file_cache.find(f.tensor);
        if (t == file_cache.end()) {
          auto loaded = io::read_safetensors(f.file, {f.tensor});
          t = file_cache.emplace(f.tensor, loaded.at(f.tensor)).first;
        }
        if (t->second.scalar_type() != at::kFloat)
          throw Error(f.file + ": tensor '" + f.tensor + "' is " + c10::toString(t->second.scalar_type()) +
                      ", expected F32");
        dest.narrow(0, a - start, b - a).copy_(t->second.reshape(-1).narrow(0, a - f.start, b - a));
        covered += b - a;
      }
  }
  if (covered != numel)
    throw Error("checkpoint lacks elements " + std::to_string(start) + ".." + std::to_string(start + numel) + " of " +
                kind + " of parameter '" + param + "' (found " + std::to_string(covered) + " of " +
                std::to_string(numel) + "); a shard is missing or truncated");
}

}  // namespace

nlohmann::json load_checkpoint(EngineCore& engine, const std::string& load_dir, const std::string& tag_in) {
  const TrainingState state = engine.training_state();
  auto& strategy = state.strategy;
  auto& adam = state.adam;
  const auto& layout = strategy.layout();
  std::string error;
  json manifest;
  std::string tag_dir;
  try {
    std::string tag = tag_in;
    if (tag.empty()) {
      auto latest = latest_checkpoint_tag(load_dir);
      if (!latest) throw Error(load_dir + ": no checkpoint to resume from (no 'latest' file)");
      tag = *latest;
    }
    tag_dir = load_dir + "/" + tag;
    manifest = read_manifest(tag_dir);
    check_model_matches(manifest, layout, tag_dir);
    const FragmentIndex index = index_shards(tag_dir, manifest);
    std::map<std::string, std::map<std::string, at::Tensor>> cache;
    c10::AutoGradMode no_grad(false);
    for (const Fragment& f : fragments_of(layout, strategy.owned_pieces(), 0, layout.total_numel())) {
      const auto& seg = strategy.segments()[f.segment];
      const std::string& name = layout.specs()[f.param].name;
      at::Tensor dests[] = {seg.master, adam[f.segment].exp_avg, adam[f.segment].exp_avg_sq};
      for (int k = 0; k < 3; ++k) {
        at::Tensor staging = at::empty({f.numel}, at::kFloat);
        fill_range(index, kKinds[k], name, f.start, f.numel, staging, cache);
        dests[k].narrow(0, f.segment_offset, f.numel).copy_(staging);
      }
    }
    // The rounded copy the optimizer keeps (offload's host buffer, the device
    // Adam's model buffer) must follow the loaded masters before publishing.
    for (auto& seg : strategy.segments())
      if (seg.params16.defined() && !seg.params16.is_same(seg.master)) seg.params16.copy_(seg.master);
    const double adam_step = manifest.value("adam_step", 0.0);
    for (auto& a : adam) a.step.fill_(adam_step);
    state.scheduler.load_last_batch_iteration(manifest.at("lr_scheduler").at("last_batch_iteration"));
    const json& sc = manifest.at("loss_scaler");
    state.scaler.load_state(optim::LossScalerState{
        sc.at("cur_scale"), sc.at("cur_iter"), sc.at("last_overflow_iter"), sc.at("cur_hysteresis"),
        sc.at("overflows_at_min")});
    state.global_steps = manifest.at("global_steps");
    state.micro_steps = manifest.at("micro_steps");
    state.skipped_steps = manifest.at("skipped_steps");
    // Same rank count: each rank gets its own random stream back; otherwise they start afresh.
    const std::string own = tag_dir + "/" + shard_name(engine.dp()->rank());
    if (manifest.at("data_parallel_size").get<int>() == engine.dp()->size() && fs::exists(own)) {
      auto rng = io::read_safetensors(own, {"rng|cpu"});
      at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle on the global generator
      gen.set_state(rng.at("rng|cpu"));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_or_throw(engine, error);
  strategy.publish_params();  // collective: the model takes the loaded masters
  strategy.wait_params();
  strategy.zero_gradients();
  if (engine.dp()->rank() == 0)
    log::info("loaded checkpoint " + tag_dir + " (saved by " + std::to_string(manifest.at("data_parallel_size").get<int>()) +
              " ranks at ZeRO stage " + std::to_string(manifest.at("zero_stage").get<int>()) + ", step " +
              std::to_string(manifest.at("global_steps").get<int64_t>()) + ")");
  return manifest.value("client_state", json::object());
}

ConsolidatedCheckpoint read_consolidated_checkpoint(const std::string& tag_dir, bool with_optimizer_states) {
  ConsolidatedCheckpoint out;
  out.path = tag_dir;
  out.manifest = std::make_shared<json>(read_manifest(tag_dir));
  const FragmentIndex index = index_shards(tag_dir, *out.manifest);
  std::map<std::string, std::map<std::string, at::Tensor>> cache;
  for (const auto& p : out.manifest->at("params")) {
    const std::string name = p.at("name");
    const auto shape = p.at("shape").get<std::vector<int64_t>>();
    const int64_t numel = p.at("numel");
    for (int k = 0; k < (with_optimizer_states ? 3 : 1); ++k) {
      at::Tensor t = at::empty({numel}, at::kFloat);
      fill_range(index, kKinds[k], name, 0, numel, t, cache);
      out.tensors[k == 0 ? name : std::string(kKinds[k]) + "|" + name] = t.view(shape);
    }
    cache.clear();  // bounded memory: one parameter's fragments at a time
  }
  return out;
}

}  // namespace stratum
