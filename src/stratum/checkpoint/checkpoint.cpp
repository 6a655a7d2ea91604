#include "stratum/checkpoint/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <cstdio>
#include <cstring>
#include <set>
#include <cstdlib>
#include <thread>
#include <atomic>

#include "stratum/checkpoint/manifest.h"
#include "stratum/checkpoint/shard_place.h"
#include "stratum/core/crc32c.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/log.h"
#include "stratum/distributed/agreement.h"
#include "stratum/distributed/job.h"
#include "stratum/io/safetensors.h"
#include "stratum/io/tensor_checksum.h"
#include "stratum/nn/tensor_parallel/shard_spec.h"
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

// Drops the fragments of parameters another rank writes (another pipeline
// stage, a lower tensor-parallel rank).
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

void agree(EngineCore& e, const std::string& step, const std::string& local_error, const ShardPlace& sp) {
  distributed::agree_on_error(sp.world ? *sp.world : *e.dp(), comm_device(e), step, local_error);
}

// The whole tensor's shape and how tensor parallelism cuts parameter i of the layout.
ManifestParam manifest_param(const zero::FlatLayout& layout, size_t i, const ShardPlace& sp) {
  const auto& spec = layout.specs()[i];
  ManifestParam p{spec.name, spec.shape, layout.params()[i].numel, {}};
  if (const auto cut = sp.spec(i)) {
    p.shape = nn::tp::whole_shape(spec.shape, *cut);
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    if (cut->parts > 1) p.split = ManifestSplit{cut->dim, cut->blocks, cut->parts, cut->padded};
  }
  return p;
}

int64_t piece_of(const ShardPlace& sp, size_t param) {
  const auto cut = sp.spec(param);
  return cut && cut->parts > 1 ? cut->index : 0;
}

// A part's manifest (a pipeline stage's, a tensor-parallel index's), as its first rank sends it to rank 0.
json manifest_part(const CheckpointManifest& m) {
  json params = json::array(), shards = json::array();
  for (const auto& p : m.params)
    params.push_back({p.name, p.shape, p.numel, p.split.dim, p.split.blocks, p.split.parts, p.split.padded});
  for (const auto& s : m.shards) {
    json fragments = json::array(), sums = json::object();
    for (const auto& f : s.fragments) fragments.push_back({f.param, f.start, f.numel, f.piece});
    for (const auto& [name, crc] : s.checksums) sums[name] = crc;
    shards.push_back({{"file", s.file}, {"rank", s.rank}, {"fragments", fragments}, {"checksums", sums}});
  }
  return {{"params", params}, {"shards", shards}, {"routing", m.routing}};
}

// Rank 0: every part into `m` (parameters by name, fragments renumbered).
void merge_manifest_parts(CheckpointManifest& m, const std::vector<json>& parts) {
  m.params.clear();
  m.shards.clear();
  std::map<std::string, int64_t> index;
  for (const json& part : parts) {
    std::vector<int64_t> renumber;
    for (const json& p : part.at("params")) {
      const std::string name = p.at(0).get<std::string>();
      auto [it, fresh] = index.emplace(name, static_cast<int64_t>(m.params.size()));
      if (fresh)
        m.params.push_back({name, p.at(1).get<std::vector<int64_t>>(), p.at(2).get<int64_t>(),
                            ManifestSplit{p.at(3).get<int64_t>(), p.at(4).get<int64_t>(), p.at(5).get<int64_t>(),
                                          p.at(6).get<int64_t>()}});
      renumber.push_back(it->second);
    }
    for (const json& s : part.at("shards")) {
      ManifestShard shard{s.at("file").get<std::string>(), s.at("rank").get<int>(), {}, {}};
      for (const json& f : s.at("fragments"))
        shard.fragments.push_back({renumber.at(f.at(0).get<size_t>()), f.at(1).get<int64_t>(), f.at(2).get<int64_t>(),
                                   f.at(3).get<int64_t>()});
      for (auto it = s.at("checksums").begin(); it != s.at("checksums").end(); ++it)
        shard.checksums[it.key()] = it.value().get<uint32_t>();
      m.shards.push_back(std::move(shard));
    }
    // Each pipeline stage's layers' routing state (the same on every part of one stage).
    for (auto it = part.at("routing").begin(); it != part.at("routing").end(); ++it)
      m.routing[it.key()] = it.value().get<std::vector<double>>();
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

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// STRATUM_CHECKPOINT_FAULT="<stage>:<throw|exit>[:<tag>]": tests fail or end a saver at a stage.
void injected_fault(const std::string& stage, const std::string& tag) {
  const char* env = std::getenv("STRATUM_CHECKPOINT_FAULT");
  if (!env || !*env) return;
  const std::string spec = env;
  const size_t a = spec.find(':');
  if (a == std::string::npos || spec.substr(0, a) != stage) return;
  const size_t b = spec.find(':', a + 1);
  const std::string how = spec.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  if (b != std::string::npos && spec.substr(b + 1) != tag) return;
  if (how == "exit") {
    std::fprintf(stderr, "STRATUM_CHECKPOINT_FAULT: exiting at the %s stage of checkpoint %s\n", stage.c_str(),
                 tag.c_str());
    std::fflush(stderr);
    std::_Exit(3);
  }
  throw Error("STRATUM_CHECKPOINT_FAULT: checkpoint " + tag + " failed at its " + stage + " stage");
}

}  // namespace

// A save between its copy into host memory and its publication.
struct CheckpointSaver::Pending {
  std::string save_dir, tag, tmp_dir;
  CheckpointSaveOptions options;
  ShardPlace sp;
  distributed::Communicator* dp = nullptr;
  c10::Device device = c10::kCPU;  // the communicator's
  int rank = 0, n = 1;
  size_t most = 0;  // tensors in the largest shard
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // this rank's shard, on the host
  std::vector<std::pair<std::string, at::Tensor>> weights;  // rank 0: model_16bit
  bool gather16 = false;
  std::optional<CheckpointManifest> manifest;          // rank 0: all but the checksums
  std::vector<std::vector<std::string>> shard_tensors;  // rank 0: each shard's tensor names, in order
  at::Tensor sums;                                      // this rank's checksums, then its bytes and microseconds
  std::string error;                                    // the write's
  uint64_t staging_bytes = 0;
  double blocked = 0;
  bool async = false;
  std::thread writer;
  std::atomic<bool> written{false};  // the background write has ended (well or not)
};

namespace {

using Pending = CheckpointSaver::Pending;

// Blocking part, collective: the staging directory, this rank's states copied
// into host memory (into `staging`'s buffers when given, else views or copies
// as .to(kCPU) makes them), rank 0's manifest but for the checksums.
void begin_save(Pending& p, EngineCore& engine, const std::string& save_dir, const std::string& tag,
                const json& client_state, const CheckpointSaveOptions& options, const PipelinePlace* place,
                HostStaging* staging) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string bad_tag = tag_name_problem(tag);
  if (!bad_tag.empty()) throw Error("save_checkpoint: tag '" + tag + "': " + bad_tag);
  const TrainingState state = engine.training_state();
  auto& strategy = state.strategy;
  auto& adam = state.adam;
  const auto& layout = strategy.layout();
  p.save_dir = save_dir;
  p.tag = tag;
  p.options = options;
  p.dp = engine.dp().get();
  p.device = comm_device(engine);
  p.rank = engine.dp()->rank();
  p.n = engine.dp()->size();
  p.sp = shard_place(engine, place);
  const int rank = p.rank, n = p.n;
  const ShardPlace& sp = p.sp;
  const std::set<std::string>* elsewhere = &sp.elsewhere;
  if (sp.several_parts() && state.gather_16bit_weights_on_save)
    throw Error("save_checkpoint: zero_optimization.stage3_gather_16bit_weights_on_model_save under a pipeline or "
                "tensor parallelism is not available (each rank holds part of the model); stratum-ckpt export "
                "writes the whole model");
  p.tmp_dir = save_dir + "/" + tag + ".tmp";
  std::string error;
  try {
    if (sp.leader()) {
      fs::make_directories(save_dir);
      fs::remove_tree(p.tmp_dir);  // a save that was killed earlier
      fs::make_directories(p.tmp_dir);
    }
  } catch (const Error& e) {
    error = e.what();
  }
  agree(engine, "saving checkpoint " + tag, error, sp);

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
  try {
    // Async: into buffers kept from save to save (pinned for a GPU's states).
    if (staging) staging->rewind();
    auto host_copy = [&](const at::Tensor& src) { return staging ? staging->copy(src) : src.to(at::kCPU); };
    for (const Fragment& f : mine) {
      const auto& seg = strategy.segments()[f.segment];
      const std::string& name = layout.specs()[f.param].name;
      const at::Tensor* sources[] = {&seg.master, &adam[f.segment].exp_avg, &adam[f.segment].exp_avg_sq};
      for (int k = 0; k < 3; ++k)
        p.tensors.emplace_back(fragment_name(kKinds[k], name, f.start),
                               host_copy(sources[k]->narrow(0, f.segment_offset, f.numel)));
    }
    p.tensors.emplace_back(kRngTensor, at::detail::getDefaultCPUGenerator().get_state());
    if (staging) p.staging_bytes = staging->bytes();
    if (options.at_stage) options.at_stage("copy", p.tmp_dir);
    injected_fault("copy", tag);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(engine, "saving checkpoint " + tag, error, sp);
  // Every rank knows how many tensors each shard holds (3 per fragment + the RNG).
  for (int r = 0; r < n; ++r)
    p.most = std::max(p.most, 3 * written_fragments(layout, strategy.stage(), r, elsewhere).size() + 1);
  p.sums = at::zeros({static_cast<int64_t>(p.most) + 2}, at::kLong);

  // stage3_gather_16bit_weights_on_model_save: the whole model in the training
  // dtype under its parameter names, gathered a layer at a time (collective).
  p.gather16 = state.gather_16bit_weights_on_save;
  if (p.gather16)
    strategy.for_each_full_param([&](int i, const at::Tensor& v) {
      if (rank == 0)
        p.weights.emplace_back(layout.specs()[i].name, v.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
    });

  if (rank == 0) {
    CheckpointManifest& m = p.manifest.emplace();
    m.tag = tag;
    m.global_steps = engine.global_steps();
    m.micro_steps = engine.micro_steps();
    m.skipped_steps = engine.skipped_steps();
    m.zero_stage = strategy.stage();
    m.offload_optimizer = state.offload_optimizer;
    m.offload_param = state.offload_param;
    m.data_parallel_size = n * sp.ep;  // the expert-parallel ranks are data-parallel ones
    m.tensor_parallel_size = sp.tp;
    m.expert_parallel_size = sp.ep;
    m.model_dtype = c10::toString(engine.model_dtype());
    for (size_t i = 0; i < layout.params().size(); ++i) m.params.push_back(manifest_param(layout, i, sp));
    for (int r = 0; r < n; ++r) {
      ManifestShard shard{shard_file_name(sp.shard(r)), sp.shard(r), {}, {}};
      std::vector<std::string>& names = p.shard_tensors.emplace_back();
      for (const Fragment& f : written_fragments(layout, strategy.stage(), r, elsewhere)) {
        shard.fragments.push_back({f.param, f.start, f.numel, piece_of(sp, static_cast<size_t>(f.param))});
        for (const char* kind : kKinds) names.push_back(fragment_name(kind, layout.specs()[f.param].name, f.start));
      }
      names.push_back(kRngTensor);
      m.shards.push_back(std::move(shard));
    }
    m.adam_step = adam.empty() ? 0.0 : adam.front().step.item<double>();
    m.lr_last_batch_iteration = state.scheduler.last_batch_iteration();
    const auto& sc = state.scaler.state();
    m.loss_scaler = {sc.cur_scale, sc.cur_iter, sc.last_overflow_iter, sc.cur_hysteresis, sc.overflows_at_min};
    m.client_state = client_state.is_null() ? json::object() : client_state;
    if (engine.step_observer()) m.routing = engine.step_observer()->saved_state();
  }
  p.blocked += seconds_since(t0);
}

uint64_t file_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return 0;
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fclose(f);
  return size > 0 ? static_cast<uint64_t>(size) : 0;
}

// No collective: this rank's shard and the checksums of its tensors; rank 0's
// model_16bit; the leader's extra files. Errors into p.error.
void write_save(Pending& p) {
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  try {
    // Checksummed on one thread while the shard is written: the write waits on
    // the disk, so the save costs about 10% more than the write alone (8 GiB
    // shards, bench_checkpoint_checksum), where a parallel pass before the
    // write costs 26% and checksumming each piece inside the write 40%.
    auto checksums = std::async(std::launch::async, [&] {
      int64_t* out = p.sums.data_ptr<int64_t>();
      for (size_t i = 0; i < p.tensors.size(); ++i) {
        const at::Tensor& t = p.tensors[i].second;
        out[i] = static_cast<int64_t>(crc32c(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size()));
      }
    });
    const std::string shard = p.tmp_dir + "/" + shard_file_name(p.sp.shard(p.rank));
    try {
      io::write_safetensors(shard, p.tensors,
                            {{"format", kCheckpointFormat}, {"rank", std::to_string(p.sp.shard(p.rank))}});
    } catch (...) {
      checksums.wait();
      throw;
    }
    checksums.get();
    bytes += file_bytes(shard);
    if (p.gather16 && p.rank == 0) {
      const std::string file = p.tmp_dir + "/" + kConsolidatedWeights;
      io::write_safetensors(file, p.weights, {{"format", "pt"}});
      bytes += file_bytes(file);
    }
    if (p.sp.leader())
      for (const auto& [name, source] : p.options.files) {
        const std::string bytes_of = fs::read_regular_file(source, size_t{1} << 30, "file saved with the checkpoint");
        fs::write_file_atomically(p.tmp_dir + "/" + name, bytes_of, name);
        bytes += bytes_of.size();
      }
    if (p.options.at_stage) p.options.at_stage("write", p.tmp_dir);
    injected_fault("write", p.tag);
  } catch (const std::exception& e) {
    p.error = e.what();
    if (p.async) log::error("checkpoint " + p.tag + ": the background write failed: " + p.error);
  }
  int64_t* out = p.sums.data_ptr<int64_t>();
  out[p.most] = static_cast<int64_t>(bytes);
  out[p.most + 1] = static_cast<int64_t>(seconds_since(t0) * 1e6);
}

// Collective, on the training thread: the ranks agree that every shard is
// written, rank 0 completes the manifest with the gathered checksums, renames
// the staging directory into place and moves `latest` last.
CheckpointSaveReport publish_save(Pending& p) {
  const auto t0 = std::chrono::steady_clock::now();
  const ShardPlace& sp = p.sp;
  auto agree_here = [&](const std::string& error) {
    distributed::agree_on_error(sp.world ? *sp.world : *p.dp, p.device, "saving checkpoint " + p.tag, error);
  };
  agree_here(p.error);
  const int64_t width = static_cast<int64_t>(p.most) + 2;
  at::Tensor all_sums = at::empty({width * p.n}, at::TensorOptions().dtype(at::kLong).device(p.device));
  at::Tensor local_sums = p.sums.to(p.device);
  p.dp->all_gather(all_sums, local_sums)->wait();
  all_sums = all_sums.cpu();
  const int64_t* gathered = all_sums.data_ptr<int64_t>();
  CheckpointSaveReport report;
  report.tag = p.tag;
  report.dir = p.save_dir + "/" + p.tag;
  report.async = p.async;
  report.staging_bytes = p.staging_bytes;
  if (sp.world) {
    // Several parts (pipeline stages, tensor-parallel indices): every rank's bytes, the slowest write.
    const int64_t* own = p.sums.data_ptr<int64_t>() + p.most;
    at::Tensor bytes = at::full({1}, own[0], at::kLong).to(p.device), micros = at::full({1}, own[1], at::kLong).to(p.device);
    sp.world->all_reduce(bytes, distributed::ReduceOp::sum)->wait();
    sp.world->all_reduce(micros, distributed::ReduceOp::max)->wait();
    report.bytes = static_cast<uint64_t>(bytes.cpu().item<int64_t>());
    report.write_seconds = static_cast<double>(micros.cpu().item<int64_t>()) / 1e6;
  } else {
    for (int r = 0; r < p.n; ++r) {
      report.bytes += static_cast<uint64_t>(gathered[r * width + static_cast<int64_t>(p.most)]);
      report.write_seconds =
          std::max(report.write_seconds, gathered[r * width + static_cast<int64_t>(p.most) + 1] / 1e6);
    }
  }

  if (p.options.before_publish) p.options.before_publish(p.tmp_dir);
  std::string error;
  try {
    if (p.options.at_stage) p.options.at_stage("publish", p.tmp_dir);
    injected_fault("publish", p.tag);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_here(error);

  if (p.rank == 0) {
    CheckpointManifest& m = *p.manifest;
    for (int r = 0; r < p.n; ++r) {
      const std::vector<std::string>& names = p.shard_tensors[static_cast<size_t>(r)];
      for (size_t t = 0; t < names.size(); ++t)
        m.shards[static_cast<size_t>(r)].checksums[names[t]] = static_cast<uint32_t>(gathered[r * width + t]);
    }
  }
  // Pipelines and tensor parallelism: each part's manifest to rank 0, which lists every part's shards.
  if (sp.several_parts() && p.rank == 0) {
    try {
      if (!sp.leaders) throw Error("save_checkpoint: internal: a part's first rank has no leaders group");
      const std::vector<std::string> parts = gather_texts(*sp.leaders, manifest_part(*p.manifest).dump());
      if (sp.leader()) {
        std::vector<json> parsed;
        for (const auto& text : parts) parsed.push_back(json::parse(text));
        merge_manifest_parts(*p.manifest, parsed);
        p.manifest->pipeline_stages = sp.stages;
        p.manifest->layer_stages = sp.layer_stages;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (sp.leader()) {
    const CheckpointManifest& m = *p.manifest;
    try {
      fs::write_file_atomically(p.tmp_dir + "/manifest.json", manifest_to_json_text(m), "the checkpoint manifest");
      const std::string final_dir = p.save_dir + "/" + p.tag;
      fs::remove_tree(final_dir);  // re-saving the same tag replaces it
      if (std::rename(p.tmp_dir.c_str(), final_dir.c_str()) != 0)
        throw Error(final_dir + ": cannot rename " + p.tmp_dir + " into place");
      // Last: the new checkpoint is complete.
      fs::write_file_atomically(p.save_dir + "/latest", p.tag + "\n", "the latest tag");
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_here(error);
  if (sp.leader()) log::debug("saved checkpoint " + p.save_dir + "/" + p.tag);
  p.blocked += seconds_since(t0);
  report.blocked_seconds = p.blocked;
  return report;
}

}  // namespace

void save_checkpoint(EngineCore& engine, const std::string& save_dir, const std::string& tag,
                     const json& client_state, const CheckpointSaveOptions& options, const PipelinePlace* place) {
  Pending p;
  begin_save(p, engine, save_dir, tag, client_state, options, place, nullptr);
  write_save(p);
  publish_save(p);
}

CheckpointSaver::CheckpointSaver(bool async, std::function<void(const CheckpointSaveReport&)> on_saved)
    : async_(async), on_saved_(std::move(on_saved)) {}

CheckpointSaver::~CheckpointSaver() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

bool CheckpointSaver::pending() const { return pending_ != nullptr; }

uint64_t CheckpointSaver::staging_bytes() const { return staging_.bytes(); }

void CheckpointSaver::reserve_staging(EngineCore& engine) {
  if (!async_) return;
  const ModelStateBytes b = engine.model_state_bytes();
  const TrainingState state = engine.training_state();
  const auto& segments = state.strategy.segments();
  const bool on_gpu = !segments.empty() && segments.front().master.is_cuda();
  // The fp32 masters and Adam's two moments this rank writes (at most).
  staging_.reserve(b.master + b.optimizer, on_gpu);
}

void CheckpointSaver::finish() {
  if (!pending_) return;
  std::unique_ptr<Pending> p = std::move(pending_);
  const auto t0 = std::chrono::steady_clock::now();
  if (p->writer.joinable()) p->writer.join();
  p->blocked += seconds_since(t0);  // waiting for the write blocks training too
  const CheckpointSaveReport report = publish_save(*p);
  if (on_saved_) on_saved_(report);
}

void CheckpointSaver::save(EngineCore& engine, const std::string& save_dir, const std::string& tag,
                           const json& client_state, const CheckpointSaveOptions& options, const PipelinePlace* place) {
  finish();  // the previous save: its buffers are reused below
  auto p = std::make_unique<Pending>();
  p->async = async_;
  begin_save(*p, engine, save_dir, tag, client_state, options, place, async_ ? &staging_ : nullptr);
  if (!async_) {
    const auto t0 = std::chrono::steady_clock::now();
    write_save(*p);
    p->blocked += seconds_since(t0);  // a synchronous save blocks for its write too
    pending_ = std::move(p);
    finish();
    return;
  }
  Pending* raw = p.get();
  pending_ = std::move(p);
  raw->writer = std::thread([raw] {
    write_save(*raw);
    raw->written = true;
  });
}

void CheckpointSaver::poll() {
  if (!pending_) return;
  Pending& p = *pending_;
  distributed::Communicator& comm = p.sp.world ? *p.sp.world : *p.dp;
  at::Tensor done = at::full({1}, p.written ? int64_t{1} : int64_t{0}, at::kLong).to(p.device);
  comm.all_reduce(done, distributed::ReduceOp::min)->wait();
  if (done.cpu().item<int64_t>() == 1) finish();  // every rank's write has ended: publish now
}

namespace {

// Where the saved fragments of one parameter are, from the manifest.
struct SavedFragment {
  std::string file, tensor;
  int64_t start, numel, piece;
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
        index[kind][param].push_back(
            SavedFragment{file, fragment_name(kind, param, f.start), f.start, f.numel, f.piece, &shard});
    }
  }
  return index;
}

// `model`: the layout's parameters as whole tensors (tensor parallelism saves
// and loads them whole); `model_params`: the whole model's names when the
// layout holds one pipeline stage's share.
void check_model_matches(const CheckpointManifest& manifest, const std::vector<ManifestParam>& model,
                         const std::string& where, const std::vector<std::string>* model_params = nullptr) {
  std::map<std::string, std::vector<int64_t>> saved;
  for (const auto& p : manifest.params) saved[p.name] = p.shape;
  std::vector<std::string> problems;
  std::map<std::string, bool> seen;
  auto shape_str = [](const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  };
  for (const auto& spec : model) {
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
                const std::string& param, int64_t piece, int64_t start, int64_t numel, at::Tensor dest,
                std::map<std::string, at::Tensor>& cache) {
  int64_t covered = 0;
  auto kit = index.find(kind);
  if (kit != index.end()) {
    auto pit = kit->second.find(param);
    if (pit != kit->second.end())
      for (const SavedFragment& f : pit->second) {
        if (f.piece != piece) continue;
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
                kind + " of parameter '" + param + "'" + (piece ? " piece " + std::to_string(piece) : std::string()) +
                " (found " + std::to_string(covered) + " of " +
                std::to_string(numel) + "); a shard is missing or truncated");
}

// Parameter `p`'s whole value (kind) from its saved pieces, [shape] in fp32.
at::Tensor saved_whole(const FragmentIndex& index, const CheckpointManifest& m, const std::string& kind,
                       const ManifestParam& p, std::map<std::string, at::Tensor>& cache) {
  at::Tensor whole = at::empty(p.shape, at::kFloat);
  const ManifestSplit& cut = p.split;
  if (cut.parts <= 1) {
    fill_range(index, m, kind, p.name, 0, 0, p.numel, whole.view(-1), cache);
    return whole;
  }
  for (int64_t q = 0; q < cut.parts; ++q) {
    at::Tensor piece = at::empty({p.piece_numel()}, at::kFloat);
    fill_range(index, m, kind, p.name, q, 0, p.piece_numel(), piece, cache);
    nn::tp::place_shard(whole, piece,
                        nn::tp::ShardSpec{cut.dim, cut.blocks, cut.parts, q, cut.padded, p.shape[cut.dim]});
  }
  return whole;
}

// The saved value of `p` cut as this rank holds it (`mine`: nullopt, whole).
at::Tensor saved_local(const FragmentIndex& index, const CheckpointManifest& m, const std::string& kind,
                       const ManifestParam& p, const std::optional<nn::tp::ShardSpec>& mine,
                       std::map<std::string, at::Tensor>& cache) {
  const at::Tensor whole = saved_whole(index, m, kind, p, cache);
  return (mine ? nn::tp::take_shard(whole, *mine) : whole).reshape(-1);
}

// Whether this rank's piece of a parameter is one the checkpoint stored as it is.
bool same_cut(const ManifestSplit& saved, const std::optional<nn::tp::ShardSpec>& mine) {
  const int64_t parts = mine ? mine->parts : 1;
  if (saved.parts != parts) return false;
  return parts == 1 || (saved.dim == mine->dim && saved.blocks == mine->blocks && saved.padded == mine->padded);
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
  ShardPlace sp;
  try {
    sp = shard_place(engine, place);
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    if (!error.empty()) throw Error(error);
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
    if (sp.leader()) warn_unverified(manifest);
    std::vector<ManifestParam> model;
    for (size_t i = 0; i < layout.params().size(); ++i) model.push_back(manifest_param(layout, i, sp));
    check_model_matches(manifest, model, tag_dir, sp.model_params);
    std::map<std::string, const ManifestParam*> saved;
    for (const auto& p : manifest.params) saved[p.name] = &p;
    const FragmentIndex index = index_shards(tag_dir, manifest);
    std::map<std::string, at::Tensor> cache;
    // A piece cut otherwise than this rank's (another tensor-parallel size):
    // the whole tensor from every saved piece, then this rank's piece of it,
    // one parameter at a time.
    std::map<std::string, at::Tensor> resharded;
    int resharded_param = -1;
    c10::AutoGradMode no_grad(false);
    for (const Fragment& f : fragments_of(layout, strategy.owned_pieces(), 0, layout.total_numel())) {
      const auto& seg = strategy.segments()[f.segment];
      const std::string& name = layout.specs()[f.param].name;
      const ManifestParam& stored = *saved.at(name);
      const std::optional<nn::tp::ShardSpec> mine = sp.spec(static_cast<size_t>(f.param));
      const bool direct = same_cut(stored.split, mine);
      if (!direct && resharded_param != f.param) {
        resharded.clear();
        cache.clear();
        resharded_param = f.param;
      }
      at::Tensor dests[] = {seg.master, adam[f.segment].exp_avg, adam[f.segment].exp_avg_sq};
      for (int k = 0; k < 3; ++k) {
        at::Tensor staging = at::empty({f.numel}, at::kFloat);
        if (direct) {
          fill_range(index, manifest, kKinds[k], name, piece_of(sp, static_cast<size_t>(f.param)), f.start, f.numel,
                     staging, cache);
        } else {
          auto it = resharded.find(kKinds[k]);
          if (it == resharded.end())
            it = resharded.emplace(kKinds[k], saved_local(index, manifest, kKinds[k], stored, mine, cache)).first;
          staging.copy_(it->second.narrow(0, f.start, f.numel));
        }
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
    if (engine.step_observer()) engine.step_observer()->load_state(manifest.routing);
    // Same layout: each rank gets its own random stream back; otherwise they start afresh.
    const int own = sp.shard(sp.dp_rank);
    if (manifest.data_parallel_size == sp.dp * sp.ep && manifest.pipeline_stages == sp.stages &&
        manifest.tensor_parallel_size == sp.tp && manifest.expert_parallel_size == sp.ep) {
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
  agree(engine, "loading checkpoint " + (tag_dir.empty() ? load_dir : tag_dir), error, sp);
  strategy.publish_params();  // collective: the model takes the loaded masters
  strategy.wait_params();
  strategy.zero_gradients();
  if (sp.leader())
    log::info("loaded checkpoint " + tag_dir + " (saved by " + std::to_string(manifest.data_parallel_size) +
              " data-parallel ranks" +
              (manifest.pipeline_stages > 1 ? " x " + std::to_string(manifest.pipeline_stages) + " pipeline stages" : "") +
              (manifest.tensor_parallel_size > 1
                   ? " x " + std::to_string(manifest.tensor_parallel_size) + " tensor-parallel ranks"
                   : "") +
              (manifest.expert_parallel_size > 1
                   ? ", experts over " + std::to_string(manifest.expert_parallel_size) + " of them"
                   : "") +
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
    for (int k = 0; k < (with_optimizer_states ? 3 : 1); ++k)
      out.tensors[k == 0 ? p.name : std::string(kKinds[k]) + "|" + p.name] =
          saved_whole(index, *manifest, kKinds[k], p, cache);
    cache.clear();  // bounded memory: one parameter's fragments at a time
  }
  return out;
}

CheckpointVerification verify_checkpoint(const std::string& tag_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const CheckpointManifest m = read_checkpoint_manifest(tag_dir);
  CheckpointVerification v;
  v.checksums = m.has_checksums();
  // Each piece of each parameter (the whole of it when saved whole), once per
  // kind: the fragments tile it exactly.
  std::map<std::pair<size_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> ranges;
  for (size_t i = 0; i < m.params.size(); ++i)
    for (int64_t q = 0; q < m.params[i].split.parts; ++q) ranges[{i, q}];
  for (const auto& shard : m.shards)
    for (const auto& f : shard.fragments) ranges[{static_cast<size_t>(f.param), f.piece}].push_back({f.start, f.numel});
  for (auto& [key, r] : ranges) {
    const ManifestParam& p = m.params[key.first];
    const std::string what = "parameter '" + p.name + "'" +
                             (p.split.parts > 1 ? " piece " + std::to_string(key.second) : std::string());
    std::sort(r.begin(), r.end());
    int64_t next = 0;
    for (const auto& [start, numel] : r) {
      if (start != next)
        throw Error(m.path + ": " + what + ": elements " + std::to_string(std::min(start, next)) + ".. are " +
                    (start > next ? "in no shard" : "in two shards"));
      next = start + numel;
    }
    if (next != p.piece_numel())
      throw Error(m.path + ": " + what + ": elements " + std::to_string(next) + ".." +
                  std::to_string(p.piece_numel()) + " are in no shard");
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
