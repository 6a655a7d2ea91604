#include "stratum/engine/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <cstdio>
#include <cstring>
#include <set>

#include "stratum/core/crc32c.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/log.h"
#include "stratum/distributed/agreement.h"
#include "stratum/distributed/job.h"
#include "stratum/engine/checkpoint_manifest.h"
#include "stratum/io/safetensors.h"
#include "stratum/io/tensor_checksum.h"
#include "stratum/optim/adam.h"
#include "stratum/optim/loss_scaler.h"
#include "stratum/optim/lr_schedule.h"

namespace stratum {

using nlohmann::json;

namespace {

constexpr const char* kConsolidatedWeights = "model_16bit.safetensors";
const char* kKinds[] = {"master", "exp_avg", "exp_avg_sq"};
constexpr const char* kRngTensor = "rng|cpu";

std::string fragment_name(const std::string& kind, const std::string& param, int64_t start) {
  return kind + "|" + param + "|" + std::to_string(start);
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

// Drops the fragments of parameters another pipeline stage writes.
std::vector<Fragment> without(std::vector<Fragment> fragments, const zero::FlatLayout& layout,
                              const std::set<std::string>* elsewhere) {
  if (!elsewhere || elsewhere->empty()) return fragments;
  std::vector<Fragment> out;
  for (const Fragment& f : fragments)
    if (!elsewhere->count(layout.specs()[f.param].name)) out.push_back(f);
  return out;
}

// The fragments rank r writes, in the order of its shard's tensors.
std::vector<Fragment> written_fragments(const zero::FlatLayout& layout, int stage, int rank,
                                        const std::set<std::string>* elsewhere = nullptr) {
  const auto [lo, hi] = write_window(layout, stage, rank);
  return without(fragments_of(layout, pieces_of_rank(layout, stage, rank), lo, hi), layout, elsewhere);
}

uint32_t checksum_of(const at::Tensor& t) { return io::tensor_crc32c(t); }

// The device the engine's data-parallel communicator works on (with offload
// the masters are on the host, the gradients are not).
c10::Device comm_device(EngineCore& e) { return e.strategy().segments().front().grad.device(); }

void agree(EngineCore& e, const std::string& step, const std::string& local_error,
           const PipelinePlace* place = nullptr) {
  distributed::agree_on_error(place ? *place->world : *e.dp(), comm_device(e), step, local_error);
}

// A stage's part of the manifest, as its first rank sends it to rank 0.
json manifest_part(const CheckpointManifest& m) {
  json params = json::array(), shards = json::array();
  for (const auto& p : m.params) params.push_back({p.name, p.shape, p.numel});
  for (const auto& s : m.shards) {
    json fragments = json::array(), sums = json::object();
    for (const auto& f : s.fragments) fragments.push_back({f.param, f.start, f.numel});
    for (const auto& [name, crc] : s.checksums) sums[name] = crc;
    shards.push_back({{"file", s.file}, {"rank", s.rank}, {"fragments", fragments}, {"checksums", sums}});
  }
  return {{"params", params}, {"shards", shards}};
}

// Rank 0: every stage's part into `m` (parameters by name, fragments renumbered).
void merge_manifest_parts(CheckpointManifest& m, const std::vector<json>& parts) {
  m.params.clear();
  m.shards.clear();
  std::map<std::string, int64_t> index;
  for (const json& part : parts) {
    std::vector<int64_t> renumber;
    for (const json& p : part.at("params")) {
      const std::string name = p.at(0).get<std::string>();
      auto [it, fresh] = index.emplace(name, static_cast<int64_t>(m.params.size()));
      if (fresh) m.params.push_back({name, p.at(1).get<std::vector<int64_t>>(), p.at(2).get<int64_t>()});
      renumber.push_back(it->second);
    }
    for (const json& s : part.at("shards")) {
      ManifestShard shard{s.at("file").get<std::string>(), s.at("rank").get<int>(), {}, {}};
      for (const json& f : s.at("fragments"))
        shard.fragments.push_back({renumber.at(f.at(0).get<size_t>()), f.at(1).get<int64_t>(), f.at(2).get<int64_t>()});
      for (auto it = s.at("checksums").begin(); it != s.at("checksums").end(); ++it)
        shard.checksums[it.key()] = it.value().get<uint32_t>();
      m.shards.push_back(std::move(shard));
    }
  }
}

// Gathers each leader's text at leaders rank 0 (lengths, then the padded bytes).
std::vector<std::string> gather_texts(distributed::Communicator& leaders, const std::string& text) {
  const int n = leaders.size();
  at::Tensor len = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  at::Tensor lens = at::empty({n}, at::kLong);
  leaders.all_gather(lens, len)->wait();
  const int64_t most = lens.max().item<int64_t>();
  at::Tensor mine = at::zeros({most}, at::kByte);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = at::empty({most * n}, at::kByte);
  leaders.all_gather(all, mine)->wait();
  std::vector<std::string> out;
  const char* bytes = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < n; ++r) out.emplace_back(bytes + r * most, static_cast<size_t>(lens[r].item<int64_t>()));
  return out;
}

// Reads one stored tensor and checks it against the manifest: dtype, size,
// checksum, finite values. `shard` may be null for a format-1 checkpoint.
at::Tensor read_checked(const std::string& file, const std::string& tensor, const ManifestShard* shard,
                        const CheckpointManifest& m, int64_t numel, bool finite) {
  if (m.has_checksums() && (!shard || !shard->checksums.count(tensor)))
    throw Error(file + ": tensor '" + tensor + "' has no checksum in " + m.path + " (the manifest does not list it)");
  at::Tensor t = io::read_safetensors(file, {tensor}).at(tensor);
  if (numel >= 0) {
    if (t.scalar_type() != at::kFloat)
      throw Error(file + ": tensor '" + tensor + "' is " + c10::toString(t.scalar_type()) + ", expected F32");
    if (t.numel() != numel)
      throw Error(file + ": tensor '" + tensor + "' has " + std::to_string(t.numel()) + " elements, the manifest says " +
                  std::to_string(numel));
  }
  if (m.has_checksums()) {
    const uint32_t want = shard->checksums.at(tensor), got = checksum_of(t);
    if (want != got)
      throw Error(file + ": tensor '" + tensor + "' is corrupt: its CRC-32C is " + crc32c_hex(got) + ", the manifest " +
                  "recorded " + crc32c_hex(want) + " when it was saved");
  }
  if (finite && !at::isfinite(t).all().item<bool>())
    throw Error(file + ": tensor '" + tensor + "' holds NaN or infinite values (a corrupt or diverged checkpoint)");
  return t;
}

}  // namespace

void save_checkpoint(EngineCore& engine, const std::string& save_dir, const std::string& tag,
                     const json& client_state, const CheckpointSaveOptions& options, const PipelinePlace* place) {
  const std::string bad_tag = tag_name_problem(tag);
  if (!bad_tag.empty()) throw Error("save_checkpoint: tag '" + tag + "': " + bad_tag);
  const TrainingState state = engine.training_state();
  auto& strategy = state.strategy;
  auto& adam = state.adam;
  const auto& layout = strategy.layout();
  const int rank = engine.dp()->rank(), n = engine.dp()->size();
  const int stage = place ? place->stage : 0;
  const bool leader = rank == 0 && stage == 0;  // writes the manifest and publishes
  const std::set<std::string>* elsewhere = place ? &place->written_elsewhere : nullptr;
  if (place && state.gather_16bit_weights_on_save)
    throw Error("save_checkpoint: zero_optimization.stage3_gather_16bit_weights_on_model_save under a pipeline is not "
                "available (each stage holds part of the model); stratum-ckpt export writes the whole model");
  const std::string tmp_dir = save_dir + "/" + tag + ".tmp";
  std::string error;
  try {
    if (leader) {
      fs::make_directories(save_dir);
      fs::remove_tree(tmp_dir);  // a save that was killed earlier
      fs::make_directories(tmp_dir);
    }
  } catch (const Error& e) {
    error = e.what();
  }
  agree(engine, "saving checkpoint " + tag, error, place);

  std::vector<std::pair<std::string, at::Tensor>> tensors;
  const auto [lo, hi] = write_window(layout, strategy.stage(), rank);
  const std::vector<Fragment> mine = without(fragments_of(layout, strategy.owned_pieces(), lo, hi), layout, elsewhere);
  {
    // Rank 0 lists every shard's fragments (and orders the gathered checksums) from the layout alone.
    const std::vector<Fragment> listed = written_fragments(layout, strategy.stage(), rank, elsewhere);
    bool same = listed.size() == mine.size();
    for (size_t i = 0; same && i < mine.size(); ++i)
      same = listed[i].param == mine[i].param && listed[i].start == mine[i].start && listed[i].numel == mine[i].numel;
    if (!same) throw Error("save_checkpoint: internal: rank " + std::to_string(rank) +
                           "'s fragments differ from those the manifest lists");
  }
  for (const Fragment& f : mine) {
    const auto& seg = strategy.segments()[f.segment];
    const std::string& name = layout.specs()[f.param].name;
    const at::Tensor* sources[] = {&seg.master, &adam[f.segment].exp_avg, &adam[f.segment].exp_avg_sq};
    for (int k = 0; k < 3; ++k)
      tensors.emplace_back(fragment_name(kKinds[k], name, f.start),
                           sources[k]->narrow(0, f.segment_offset, f.numel).to(at::kCPU));
  }
  tensors.emplace_back(kRngTensor, at::detail::getDefaultCPUGenerator().get_state());
  // Checksums of the bytes as written, gathered for rank 0's manifest: every
  // rank knows how many tensors each shard holds (3 per fragment + the RNG).
  std::vector<size_t> shard_tensors(static_cast<size_t>(n));
  size_t most = 0;
  for (int r = 0; r < n; ++r)
    most = std::max(most, shard_tensors[r] = 3 * written_fragments(layout, strategy.stage(), r, elsewhere).size() + 1);
  at::Tensor sums = at::zeros({static_cast<int64_t>(most)}, at::kLong);
  // Checksummed on one thread while the shard is written: the write waits on
  // the disk, so the save costs about 10% more than the write alone (8 GiB
  // shards, bench_checkpoint_checksum), where a parallel pass before the
  // write costs 26% and checksumming each piece inside the write 40%.
  auto checksums = std::async(std::launch::async, [&] {
    int64_t* out = sums.data_ptr<int64_t>();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i].second;
      out[i] = static_cast<int64_t>(crc32c(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size()));
    }
  });
  try {
    io::write_safetensors(tmp_dir + "/" + shard_file_name(stage * n + rank), tensors,
                          {{"format", kCheckpointFormat}, {"rank", std::to_string(stage * n + rank)}});
  } catch (const Error& e) {
    error = e.what();
  }
  checksums.get();
  agree(engine, "saving checkpoint " + tag, error, place);
  at::Tensor all_sums = at::empty({static_cast<int64_t>(most) * n}, at::TensorOptions().dtype(at::kLong).device(comm_device(engine)));
  at::Tensor local_sums = sums.to(comm_device(engine));
  engine.dp()->all_gather(all_sums, local_sums)->wait();
  all_sums = all_sums.cpu();

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
    agree(engine, "saving checkpoint " + tag, error);
  }

  if (options.before_publish) options.before_publish(tmp_dir);

  std::optional<CheckpointManifest> manifest;
  if (rank == 0) {
    CheckpointManifest& m = manifest.emplace();
    m.tag = tag;
    m.global_steps = engine.global_steps();
    m.micro_steps = engine.micro_steps();
    m.skipped_steps = engine.skipped_steps();
    m.zero_stage = strategy.stage();
    m.data_parallel_size = n;
    m.model_dtype = c10::toString(engine.model_dtype());
    for (size_t i = 0; i < layout.params().size(); ++i)
      m.params.push_back({layout.specs()[i].name, layout.specs()[i].shape, layout.params()[i].numel});
    const int64_t* gathered = all_sums.data_ptr<int64_t>();
    for (int r = 0; r < n; ++r) {
      ManifestShard shard{shard_file_name(stage * n + r), stage * n + r, {}, {}};
      size_t t = 0;
      auto record = [&](const std::string& name) {
        shard.checksums[name] = static_cast<uint32_t>(gathered[static_cast<size_t>(r) * most + t++]);
      };
      for (const Fragment& f : written_fragments(layout, strategy.stage(), r, elsewhere)) {
        shard.fragments.push_back({f.param, f.start, f.numel});
        for (const char* kind : kKinds) record(fragment_name(kind, layout.specs()[f.param].name, f.start));
      }
      record(kRngTensor);
      m.shards.push_back(std::move(shard));
    }
    m.adam_step = adam.empty() ? 0.0 : adam.front().step.item<double>();
    m.lr_last_batch_iteration = state.scheduler.last_batch_iteration();
    const auto& sc = state.scaler.state();
    m.loss_scaler = {sc.cur_scale, sc.cur_iter, sc.last_overflow_iter, sc.cur_hysteresis, sc.overflows_at_min};
    m.client_state = client_state.is_null() ? json::object() : client_state;
  }
  // Pipelines: each stage's part to rank 0, which lists every stage's shards.
  if (place && place->stages > 1 && rank == 0) {
    try {
      if (!place->leaders) throw Error("save_checkpoint: internal: a stage's first rank has no leaders group");
      const std::vector<std::string> parts = gather_texts(*place->leaders, manifest_part(*manifest).dump());
      if (leader) {
        std::vector<json> parsed;
        for (const auto& text : parts) parsed.push_back(json::parse(text));
        merge_manifest_parts(*manifest, parsed);
        manifest->pipeline_stages = place->stages;
        manifest->layer_stages = place->layer_stages;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (leader) {
    const CheckpointManifest& m = *manifest;
    try {
      fs::write_file_atomically(tmp_dir + "/manifest.json", manifest_to_json_text(m), "the checkpoint manifest");
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
  agree(engine, "saving checkpoint " + tag, error, place);
  if (leader) log::debug("saved checkpoint " + save_dir + "/" + tag);
}

namespace {

// Where the saved fragments of one parameter are, from the manifest.
struct SavedFragment {
  std::string file, tensor;
  int64_t start, numel;
  const ManifestShard* shard;
};
using FragmentIndex = std::map<std::string, std::map<std::string, std::vector<SavedFragment>>>;  // kind -> param -> list

FragmentIndex index_shards(const std::string& tag_dir, const CheckpointManifest& m) {
  FragmentIndex index;
  for (const auto& shard : m.shards) {
    const std::string file = tag_dir + "/" + shard.file;
    if (!fs::exists(file)) throw Error(file + ": shard missing from the checkpoint");
    for (const auto& f : shard.fragments) {
      const std::string& param = m.params[static_cast<size_t>(f.param)].name;
      for (const char* kind : kKinds)
        index[kind][param].push_back(SavedFragment{file, fragment_name(kind, param, f.start), f.start, f.numel, &shard});
    }
  }
  return index;
}

// `model_params`: the whole model's names when the layout holds one pipeline stage's share.
void check_model_matches(const CheckpointManifest& manifest, const zero::FlatLayout& layout, const std::string& where,
                         const std::vector<std::string>* model_params = nullptr) {
  std::map<std::string, std::vector<int64_t>> saved;
  for (const auto& p : manifest.params) saved[p.name] = p.shape;
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
  if (model_params)
    for (const auto& name : *model_params) seen[name] = true;
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
void fill_range(const FragmentIndex& index, const CheckpointManifest& m, const std::string& kind,
                const std::string& param, int64_t start, int64_t numel, at::Tensor dest,
                std::map<std::string, at::Tensor>& cache) {
  int64_t covered = 0;
  auto kit = index.find(kind);
  if (kit != index.end()) {
    auto pit = kit->second.find(param);
    if (pit != kit->second.end())
      for (const SavedFragment& f : pit->second) {
        const int64_t a = std::max(start, f.start), b = std::min(start + numel, f.start + f.numel);
        if (a >= b) continue;
        const std::string key = f.file + "\n" + f.tensor;
        auto t = cache.find(key);
        if (t == cache.end())
          t = cache.emplace(key, read_checked(f.file, f.tensor, f.shard, m, f.numel, /*finite=*/true)).first;
        dest.narrow(0, a - start, b - a).copy_(t->second.reshape(-1).narrow(0, a - f.start, b - a));
        covered += b - a;
      }
  }
  if (covered != numel)
    throw Error("checkpoint lacks elements " + std::to_string(start) + ".." + std::to_string(start + numel) + " of " +
                kind + " of parameter '" + param + "' (found " + std::to_string(covered) + " of " +
                std::to_string(numel) + "); a shard is missing or truncated");
}

void warn_unverified(const CheckpointManifest& m) {
  if (!m.has_checksums())
    log::warn(m.path + ": saved without checksums (checkpoint format 1): tensors are checked for NaN/Inf only");
}

}  // namespace

nlohmann::json load_checkpoint(EngineCore& engine, const std::string& load_dir, const std::string& tag_in,
                               const PipelinePlace* place) {
  const TrainingState state = engine.training_state();
  auto& strategy = state.strategy;
  auto& adam = state.adam;
  const auto& layout = strategy.layout();
  std::string error;
  CheckpointManifest manifest;
  std::string tag_dir;
  try {
    std::string tag = tag_in;
    if (tag.empty()) {
      auto latest = latest_checkpoint_tag(load_dir);
      if (!latest) throw Error(load_dir + ": no checkpoint to resume from (no 'latest' file)");
      tag = *latest;
    } else if (const std::string why = tag_name_problem(tag); !why.empty()) {
      throw Error("tag '" + tag + "': " + why);
    }
    tag_dir = load_dir + "/" + tag;
    manifest = read_checkpoint_manifest(tag_dir);
    if (engine.dp()->rank() == 0 && (!place || place->stage == 0)) warn_unverified(manifest);
    check_model_matches(manifest, layout, tag_dir, place ? &place->model_params : nullptr);
    const FragmentIndex index = index_shards(tag_dir, manifest);
    std::map<std::string, at::Tensor> cache;
    c10::AutoGradMode no_grad(false);
    for (const Fragment& f : fragments_of(layout, strategy.owned_pieces(), 0, layout.total_numel())) {
      const auto& seg = strategy.segments()[f.segment];
      const std::string& name = layout.specs()[f.param].name;
      at::Tensor dests[] = {seg.master, adam[f.segment].exp_avg, adam[f.segment].exp_avg_sq};
      for (int k = 0; k < 3; ++k) {
        at::Tensor staging = at::empty({f.numel}, at::kFloat);
        fill_range(index, manifest, kKinds[k], name, f.start, f.numel, staging, cache);
        dests[k].narrow(0, f.segment_offset, f.numel).copy_(staging);
      }
    }
    // load_from_fp32_weights false (DeepSpeed): the masters restart from the
    // 16-bit weights the model trained with, i.e. the saved masters rounded.
    if (!state.load_from_fp32_weights && engine.model_dtype() != at::kFloat)
      for (auto& seg : strategy.segments()) seg.master.copy_(seg.master.to(engine.model_dtype()));
    // The rounded copy the optimizer keeps (offload's host buffer, the device
    // Adam's model buffer) must follow the loaded masters before publishing.
    for (auto& seg : strategy.segments())
      if (seg.params16.defined() && !seg.params16.is_same(seg.master)) seg.params16.copy_(seg.master);
    for (auto& a : adam) a.step.fill_(manifest.adam_step);
    state.scheduler.load_last_batch_iteration(manifest.lr_last_batch_iteration);
    const auto& ls = manifest.loss_scaler;
    state.scaler.load_state(
        optim::LossScalerState{ls.cur_scale, ls.cur_iter, ls.last_overflow_iter, ls.cur_hysteresis, ls.overflows_at_min});
    state.global_steps = manifest.global_steps;
    state.micro_steps = manifest.micro_steps;
    state.skipped_steps = manifest.skipped_steps;
    // Same layout: each rank gets its own random stream back; otherwise they start afresh.
    const int stages = place ? place->stages : 1;
    const int own = (place ? place->stage : 0) * engine.dp()->size() + engine.dp()->rank();
    if (manifest.data_parallel_size == engine.dp()->size() && manifest.pipeline_stages == stages) {
      const std::string file = tag_dir + "/" + manifest.shards[static_cast<size_t>(own)].file;
      at::Tensor rng = read_checked(file, kRngTensor, &manifest.shards[static_cast<size_t>(own)], manifest, -1,
                                    /*finite=*/false);
      at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle on the global generator
      try {
        gen.set_state(rng);
      } catch (const std::exception&) {
        throw Error(file + ": tensor '" + std::string(kRngTensor) + "' is not a CPU generator state");
      }
    }
  } catch (const std::exception& e) {
    error = distributed::describe_exception(e);
  }
  agree(engine, "loading checkpoint " + (tag_dir.empty() ? load_dir : tag_dir), error, place);
  strategy.publish_params();  // collective: the model takes the loaded masters
  strategy.wait_params();
  strategy.zero_gradients();
  if (engine.dp()->rank() == 0 && (!place || place->stage == 0))
    log::info("loaded checkpoint " + tag_dir + " (saved by " + std::to_string(manifest.data_parallel_size) +
              " data-parallel ranks" +
              (manifest.pipeline_stages > 1 ? " x " + std::to_string(manifest.pipeline_stages) + " pipeline stages" : "") +
              " at ZeRO stage " + std::to_string(manifest.zero_stage) + ", step " + std::to_string(manifest.global_steps) +
              ")");
  return manifest.client_state;
}

ConsolidatedCheckpoint read_consolidated_checkpoint(const std::string& tag_dir, bool with_optimizer_states) {
  ConsolidatedCheckpoint out;
  out.path = tag_dir;
  auto manifest = std::make_shared<CheckpointManifest>(read_checkpoint_manifest(tag_dir));
  warn_unverified(*manifest);
  out.manifest = manifest;
  const FragmentIndex index = index_shards(tag_dir, *manifest);
  std::map<std::string, at::Tensor> cache;
  for (const auto& p : manifest->params) {
    for (int k = 0; k < (with_optimizer_states ? 3 : 1); ++k) {
      at::Tensor t = at::empty({p.numel}, at::kFloat);
      fill_range(index, *manifest, kKinds[k], p.name, 0, p.numel, t, cache);
      out.tensors[k == 0 ? p.name : std::string(kKinds[k]) + "|" + p.name] = t.view(p.shape);
    }
    cache.clear();  // bounded memory: one parameter's fragments at a time
  }
  return out;
}

CheckpointVerification verify_checkpoint(const std::string& tag_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const CheckpointManifest m = read_checkpoint_manifest(tag_dir);
  CheckpointVerification v;
  v.checksums = m.has_checksums();
  // Each parameter's elements, once per kind: the fragments tile it exactly.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(m.params.size());
  for (const auto& shard : m.shards)
    for (const auto& f : shard.fragments) ranges[static_cast<size_t>(f.param)].push_back({f.start, f.numel});
  for (size_t i = 0; i < m.params.size(); ++i) {
    auto& r = ranges[i];
    std::sort(r.begin(), r.end());
    int64_t next = 0;
    for (const auto& [start, numel] : r) {
      if (start != next)
        throw Error(m.path + ": parameter '" + m.params[i].name + "': elements " + std::to_string(std::min(start, next)) +
                    ".. are " + (start > next ? "in no shard" : "in two shards"));
      next = start + numel;
    }
    if (next != m.params[i].numel)
      throw Error(m.path + ": parameter '" + m.params[i].name + "': elements " + std::to_string(next) + ".." +
                  std::to_string(m.params[i].numel) + " are in no shard");
  }
  for (const auto& shard : m.shards) {
    const std::string file = tag_dir + "/" + shard.file;
    if (!fs::exists(file)) throw Error(file + ": shard missing from the checkpoint");
    const io::SafetensorsHeader header = io::read_safetensors_header(file);
    std::map<std::string, int64_t> expected;  // tensor -> elements (-1: any)
    for (const auto& f : shard.fragments)
      for (const char* kind : kKinds)
        expected[fragment_name(kind, m.params[static_cast<size_t>(f.param)].name, f.start)] = f.numel;
    expected[kRngTensor] = -1;
    std::set<std::string> in_file;
    for (const auto& e : header.tensors) {
      in_file.insert(e.name);
      auto it = expected.find(e.name);
      if (it == expected.end()) throw Error(file + ": tensor '" + e.name + "' is not listed in " + m.path);
      read_checked(file, e.name, &shard, m, it->second, /*finite=*/it->second >= 0);
      ++v.tensors;
      v.bytes += e.end - e.begin;
    }
    for (const auto& [name, numel] : expected)
      if (!in_file.count(name)) throw Error(file + ": tensor '" + name + "' listed in " + m.path + " is missing");
    ++v.shards;
  }
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return v;
}

}  // namespace stratum
