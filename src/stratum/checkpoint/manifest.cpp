#include "stratum/checkpoint/manifest.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "stratum/checkpoint/tags.h"
#include "stratum/core/crc32c.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_depth.h"

namespace stratum {

using nlohmann::json;

namespace {

constexpr int kMaxDataParallel = 1 << 20;
// A mixture of experts' routing state: a bias a layer (4,096 layers), an entry an expert (65,536).
constexpr size_t kMaxRoutingEntries = 1 << 12;
constexpr size_t kMaxRoutingValues = 1 << 16;
constexpr size_t kMaxShownProblems = 12;
constexpr size_t kMaxDims = 16;

// Collects problems, each with its JSON path, while reading typed fields.
class FieldReader {
 public:
  explicit FieldReader(std::vector<std::string>& problems) : problems_(problems) {}

  const json* get(const json& obj, const std::string& key, const std::string& where) {
    if (!obj.is_object() || !obj.contains(key)) {
      problem(join(where, key) + ": missing");
      return nullptr;
    }
    return &obj.at(key);
  }
  bool integer(const json& obj, const std::string& key, const std::string& where, int64_t lo, int64_t hi,
               int64_t& out) {
    const json* v = get(obj, key, where);
    return v && integer_value(*v, join(where, key), lo, hi, out);
  }
  // `out` is set only when the value is valid.
  bool integer_value(const json& v, const std::string& path, int64_t lo, int64_t hi, int64_t& out) {
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) return range(path, lo, hi, v.dump());
      x = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else {
      problem(path + ": expected an integer, got " + shown(v));
      return false;
    }
    if (x < lo || x > hi) return range(path, lo, hi, v.dump());
    out = x;
    return true;
  }
  bool number(const json& obj, const std::string& key, const std::string& where, double lo, double hi, double& out) {
    const json* v = get(obj, key, where);
    if (!v) return false;
    if (!v->is_number()) {
      problem(join(where, key) + ": expected a number, got " + shown(*v));
      return false;
    }
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      problem(join(where, key) + ": expected a finite number in [" + fmt(lo) + ", " + fmt(hi) + "], got " + v->dump());
      return false;
    }
    out = x;
    return true;
  }
  bool string(const json& obj, const std::string& key, const std::string& where, std::string& out) {
    const json* v = get(obj, key, where);
    if (!v) return false;
    if (!v->is_string()) {
      problem(join(where, key) + ": expected a string, got " + shown(*v));
      return false;
    }
    out = v->get<std::string>();
    return true;
  }
  const json* array(const json& obj, const std::string& key, const std::string& where) {
    const json* v = get(obj, key, where);
    if (v && !v->is_array()) {
      problem(join(where, key) + ": expected an array, got " + shown(*v));
      return nullptr;
    }
    return v;
  }
  const json* object(const json& obj, const std::string& key, const std::string& where) {
    const json* v = get(obj, key, where);
    if (v && !v->is_object()) {
      problem(join(where, key) + ": expected an object, got " + shown(*v));
      return nullptr;
    }
    return v;
  }
  void problem(std::string p) { problems_.push_back(std::move(p)); }
  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  // A value in a message, shortened: a manifest may hold anything.
  static std::string shown(const json& v) {
    std::string s = v.dump();
    if (s.size() > 60) s = s.substr(0, 40) + "... (" + std::to_string(s.size()) + " characters)";
    return s;
  }

 private:
  bool range(const std::string& path, int64_t lo, int64_t hi, const std::string& got) {
    problem(path + ": expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
            (got.size() > 40 ? got.substr(0, 40) + "..." : got));
    return false;
  }
  static std::string fmt(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
  }
  std::vector<std::string>& problems_;
};

bool parse_hex32(const std::string& s, uint32_t& out) {
  if (s.size() != 8) return false;
  out = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    out = (out << 4) | static_cast<uint32_t>(d);
  }
  return true;
}

void read_params(FieldReader& r, const json& m, CheckpointManifest& out) {
  const json* params = r.array(m, "params", "");
  if (!params) return;
  if (params->empty()) r.problem("params: empty (a checkpoint holds at least one parameter)");
  std::set<std::string> names;
  int64_t total = 0;  // total_numel() adds them up unchecked
  for (size_t i = 0; i < params->size(); ++i) {
    const std::string where = "params[" + std::to_string(i) + "]";
    const json& p = (*params)[i];
    ManifestParam param;
    bool ok = r.string(p, "name", where, param.name);
    if (ok && param.name.empty()) r.problem(where + ".name: empty"), ok = false;
    if (ok && !names.insert(param.name).second) r.problem(where + ".name: '" + param.name + "' given twice"), ok = false;
    const json* shape = r.array(p, "shape", where);
    int64_t product = 1;
    if (shape) {
      if (shape->size() > kMaxDims) r.problem(where + ".shape: " + std::to_string(shape->size()) + " dimensions"), ok = false;
      for (size_t d = 0; d < shape->size() && d <= kMaxDims; ++d) {
        int64_t dim = 0;
        if (!r.integer_value((*shape)[d], where + ".shape[" + std::to_string(d) + "]", 0,
                             std::numeric_limits<int64_t>::max(), dim)) {
          ok = false;
          continue;
        }
        param.shape.push_back(dim);
        if (__builtin_mul_overflow(product, dim, &product)) {
          r.problem(where + ".shape: the element count overflows 64 bits");
          ok = false;
          break;
        }
      }
    } else {
      ok = false;
    }
    if (r.integer(p, "numel", where, 0, std::numeric_limits<int64_t>::max(), param.numel) && shape && ok &&
        param.numel != product)
      r.problem(where + ".numel: " + std::to_string(param.numel) + ", but its shape holds " + std::to_string(product));
    if (p.is_object() && p.contains("split") && ok) {
      const std::string sw = where + ".split";
      if (const json* split = r.object(p, "split", where)) {
        ManifestSplit& sp = param.split;
        const int64_t dims = static_cast<int64_t>(param.shape.size());
        bool good = r.integer(*split, "dim", sw, 0, std::max<int64_t>(dims - 1, 0), sp.dim) && dims > 0;
        good = r.integer(*split, "blocks", sw, 1, kMaxDataParallel, sp.blocks) && good;
        good = r.integer(*split, "parts", sw, 1, kMaxDataParallel, sp.parts) && good;
        good = r.integer(*split, "padded", sw, 0, std::numeric_limits<int64_t>::max(), sp.padded) && good;
        if (good) {
          const int64_t size = param.shape[static_cast<size_t>(sp.dim)];
          const int64_t n = sp.padded > 0 ? sp.padded : size;
          if (out.tensor_parallel_size % sp.parts != 0)
            r.problem(sw + ".parts: " + std::to_string(sp.parts) + " pieces do not divide the " +
                      std::to_string(out.tensor_parallel_size) + " tensor-parallel ranks that saved it");
          else if (sp.padded > 0 && sp.padded < size)
            r.problem(sw + ".padded: " + std::to_string(sp.padded) + " is less than dimension " +
                      std::to_string(sp.dim) + "'s " + std::to_string(size));
          else if (n % (sp.blocks * sp.parts) != 0)
            r.problem(sw + ": " + std::to_string(n) + " does not split into " + std::to_string(sp.blocks) +
                      " blocks of " + std::to_string(sp.parts) + " pieces");
        } else {
          sp = ManifestSplit{};
        }
      }
    }
    if (__builtin_add_overflow(total, param.numel, &total)) {
      r.problem(where + ".numel: " + std::to_string(param.numel) + " takes the parameters' total past 64 bits");
      total = 0;
    }
    out.params.push_back(std::move(param));
  }
}

void read_shards(FieldReader& r, const json& m, CheckpointManifest& out) {
  const json* shards = r.array(m, "shards", "");
  if (!shards) return;
  const int64_t ranks = int64_t{out.data_parallel_size} * out.pipeline_stages * out.tensor_parallel_size;
  if (static_cast<int64_t>(shards->size()) != ranks)
    r.problem("shards: " + std::to_string(shards->size()) + " shards, but data_parallel_size is " +
              std::to_string(out.data_parallel_size) +
              (out.pipeline_stages > 1 ? " x " + std::to_string(out.pipeline_stages) + " pipeline stages" : "") +
              (out.tensor_parallel_size > 1 ? " x " + std::to_string(out.tensor_parallel_size) + " tensor-parallel ranks"
                                            : "") +
              " (one per rank)");
  for (size_t i = 0; i < shards->size() && i < static_cast<size_t>(kMaxDataParallel); ++i) {
    const std::string where = "shards[" + std::to_string(i) + "]";
    const json& s = (*shards)[i];
    ManifestShard shard;
    int64_t rank = -1;
    if (r.integer(s, "rank", where, 0, kMaxDataParallel - 1, rank)) {
      shard.rank = static_cast<int>(rank);
      if (rank != static_cast<int64_t>(i)) r.problem(where + ".rank: " + std::to_string(rank) + ", expected " + std::to_string(i));
    }
    // The name is the rank's own: a manifest cannot point a loader at another file.
    if (r.string(s, "file", where, shard.file) && shard.file != shard_file_name(static_cast<int>(i)))
      r.problem(where + ".file: " + FieldReader::shown(s.at("file")) + ", expected '" +
                shard_file_name(static_cast<int>(i)) + "'");
    if (const json* frags = r.array(s, "fragments", where)) {
      for (size_t k = 0; k < frags->size(); ++k) {
        const std::string fw = where + ".fragments[" + std::to_string(k) + "]";
        const json& f = (*frags)[k];
        if (!f.is_array() || (f.size() != 3 && f.size() != 4)) {
          r.problem(fw + ": expected [parameter index, first element, elements(, piece)], got " + FieldReader::shown(f));
          continue;
        }
        ManifestFragment frag;
        const int64_t np = static_cast<int64_t>(out.params.size());
        if (!r.integer_value(f[0], fw + "[0]", 0, std::max<int64_t>(np - 1, 0), frag.param) ||
            !r.integer_value(f[1], fw + "[1]", 0, std::numeric_limits<int64_t>::max(), frag.start) ||
            !r.integer_value(f[2], fw + "[2]", 1, std::numeric_limits<int64_t>::max(), frag.numel))
          continue;
        if (frag.param >= np) continue;  // reported as out of range above (or params is broken)
        const ManifestParam& param = out.params[static_cast<size_t>(frag.param)];
        if (f.size() == 4 && !r.integer_value(f[3], fw + "[3]", 0, param.split.parts - 1, frag.piece)) continue;
        const int64_t param_numel = param.piece_numel();
        int64_t end = 0;
        if (__builtin_add_overflow(frag.start, frag.numel, &end) || end > param_numel) {
          r.problem(fw + ": elements " + std::to_string(frag.start) + " + " + std::to_string(frag.numel) +
                    " go past parameter '" + param.name + "'" +
                    (param.split.parts > 1 ? " piece " + std::to_string(frag.piece) : std::string()) + " (" +
                    std::to_string(param_numel) + " elements)");
          continue;
        }
        shard.fragments.push_back(frag);
      }
    }
    if (out.has_checksums()) {
      if (const json* sums = r.object(s, "checksums", where)) {
        for (const auto& item : sums->items()) {
          uint32_t crc = 0;
          if (!item.value().is_string() || !parse_hex32(item.value().get<std::string>(), crc)) {
            r.problem(where + ".checksums: tensor '" + FieldReader::shown(json(item.key())) +
                      "': expected 8 lowercase hex digits, got " + FieldReader::shown(item.value()));
            continue;
          }
          shard.checksums.emplace(item.key(), crc);
        }
      }
    }
    out.shards.push_back(std::move(shard));
  }
}

}  // namespace

int64_t ManifestParam::piece_numel() const {
  if (split.parts <= 1 || split.dim >= static_cast<int64_t>(shape.size())) return numel;
  const int64_t size = shape[static_cast<size_t>(split.dim)];
  if (size == 0) return 0;
  return numel / size * ((split.padded > 0 ? split.padded : size) / split.parts);
}

int64_t CheckpointManifest::total_numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel;
  return n;
}

std::string shard_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

CheckpointManifest parse_checkpoint_manifest(const std::string& text, const std::string& path) {
  if (auto at = find_excess_json_nesting(text))
    throw Error(path + ": corrupt manifest: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (byte " +
                std::to_string(*at) + ")");
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": corrupt manifest (not JSON): " + e.what());
  }
  if (!m.is_object()) throw Error(path + ": corrupt manifest: not a JSON object");
  if (!m.contains("format") || m["format"] != kCheckpointFormat)
    throw Error(path + ": not a Stratum checkpoint manifest (its 'format' is not \"" + kCheckpointFormat + "\")");

  CheckpointManifest out;
  out.path = path;
  std::vector<std::string> problems;
  FieldReader r(problems);
  int64_t v = 0;
  if (r.integer(m, "version", "", 1, std::numeric_limits<int64_t>::max(), v) && v > kCheckpointVersion)
    throw Error(path + ": checkpoint format version " + std::to_string(v) + ", this build reads 1.." +
                std::to_string(kCheckpointVersion) + " (saved by a newer Stratum?)");
  out.version = static_cast<int>(v);
  if (r.string(m, "tag", "", out.tag)) {
    const std::string why = tag_name_problem(out.tag);
    if (!why.empty()) r.problem("tag: " + why);
  }
  const int64_t big = std::numeric_limits<int64_t>::max();
  const bool have_global = r.integer(m, "global_steps", "", 0, big, out.global_steps);
  r.integer(m, "micro_steps", "", 0, big, out.micro_steps);
  if (r.integer(m, "skipped_steps", "", 0, big, out.skipped_steps) && have_global &&
      out.skipped_steps > out.global_steps)
    r.problem("skipped_steps: " + std::to_string(out.skipped_steps) + " is more than global_steps " +
              std::to_string(out.global_steps) + " (skipped steps count among them)");
  if (r.integer(m, "zero_stage", "", 0, 3, v)) out.zero_stage = static_cast<int>(v);
  if (r.integer(m, "data_parallel_size", "", 1, kMaxDataParallel, v)) out.data_parallel_size = static_cast<int>(v);
  // What the saving job offloaded (information only: a load works at any offload). Absent in older manifests.
  if (m.contains("offload"))
    if (const json* off = r.object(m, "offload", ""))
      for (const auto& [key, slot] : {std::pair{"optimizer", &out.offload_optimizer}, std::pair{"param", &out.offload_param}})
        if (off->contains(key)) {
          if (off->at(key).is_boolean()) *slot = off->at(key).get<bool>();
          else r.problem(std::string("offload.") + key + ": expected true or false, got " + FieldReader::shown(off->at(key)));
        }
  if (r.string(m, "model_dtype", "", out.model_dtype) && out.model_dtype != "Float" && out.model_dtype != "BFloat16" &&
      out.model_dtype != "Half")
    r.problem("model_dtype: expected Float, BFloat16 or Half, got '" + FieldReader::shown(json(out.model_dtype)) + "'");
  // Written by pipelines only: absent means one stage.
  if (m.contains("pipeline")) {
    if (const json* pipe = r.object(m, "pipeline", "")) {
      if (r.integer(*pipe, "stages", "pipeline", 1, kMaxDataParallel, v)) out.pipeline_stages = static_cast<int>(v);
      if (const json* layers = r.array(*pipe, "layer_stages", "pipeline"))
        for (size_t i = 0; i < layers->size() && i < 1000000; ++i) {
          int64_t stage = 0;
          if (r.integer_value((*layers)[i], "pipeline.layer_stages[" + std::to_string(i) + "]", 0,
                              out.pipeline_stages - 1, stage))
            out.layer_stages.push_back(static_cast<int>(stage));
        }
    }
  }
  // Written by tensor-parallel jobs only: absent means one rank.
  if (m.contains("tensor_parallel"))
    if (const json* tp = r.object(m, "tensor_parallel", ""))
      if (r.integer(*tp, "size", "tensor_parallel", 1, kMaxDataParallel, v)) out.tensor_parallel_size = static_cast<int>(v);
  // Written by expert-parallel jobs only: absent means none.
  if (m.contains("expert_parallel"))
    if (const json* ep = r.object(m, "expert_parallel", ""))
      if (r.integer(*ep, "size", "expert_parallel", 1, kMaxDataParallel, v)) {
        out.expert_parallel_size = static_cast<int>(v);
        if (out.data_parallel_size % out.expert_parallel_size != 0)
          r.problem("expert_parallel.size: is " + std::to_string(v) + ", which does not divide the " +
                    std::to_string(out.data_parallel_size) + " data-parallel ranks");
      }
  read_params(r, m, out);
  read_shards(r, m, out);
  r.number(m, "adam_step", "", 0.0, 9.0e15, out.adam_step);
  if (const json* lr = r.object(m, "lr_scheduler", ""))
    r.integer(*lr, "last_batch_iteration", "lr_scheduler", -1, big, out.lr_last_batch_iteration);
  if (const json* sc = r.object(m, "loss_scaler", "")) {
    auto& ls = out.loss_scaler;
    if (r.number(*sc, "cur_scale", "loss_scaler", 0.0, std::numeric_limits<double>::max(), ls.cur_scale) &&
        ls.cur_scale <= 0.0)
      r.problem("loss_scaler.cur_scale: must be positive, got " + std::to_string(ls.cur_scale));
    r.integer(*sc, "cur_iter", "loss_scaler", 0, big, ls.cur_iter);
    r.integer(*sc, "last_overflow_iter", "loss_scaler", -1, big, ls.last_overflow_iter);
    r.integer(*sc, "cur_hysteresis", "loss_scaler", 0, big, ls.cur_hysteresis);
    r.integer(*sc, "overflows_at_min", "loss_scaler", 0, big, ls.overflows_at_min);
  }
  // Written when a mixture of experts moves expert biases: names to arrays of finite numbers.
  if (m.contains("routing")) {
    const json& routing = m["routing"];
    if (!routing.is_object() || routing.size() > kMaxRoutingEntries) {
      r.problem("routing: expected an object of at most " + std::to_string(kMaxRoutingEntries) + " arrays, got " +
                FieldReader::shown(routing));
    } else {
      for (auto it = routing.begin(); it != routing.end(); ++it) {
        const json& v = it.value();
        bool ok = v.is_array() && v.size() <= kMaxRoutingValues;
        std::vector<double> values;
        for (size_t i = 0; ok && i < v.size(); ++i) {
          ok = v[i].is_number() && std::isfinite(v[i].get<double>());
          if (ok) values.push_back(v[i].get<double>());
        }
        if (!ok)
          r.problem("routing." + it.key() + ": expected an array of at most " + std::to_string(kMaxRoutingValues) +
                    " finite numbers");
        else
          out.routing[it.key()] = std::move(values);
      }
    }
  }
  if (m.contains("client_state")) {
    if (m["client_state"].is_object()) out.client_state = m["client_state"];
    else if (m["client_state"].is_null()) out.client_state = json::object();  // saved without one
    else r.problem("client_state: expected an object, got " + FieldReader::shown(m["client_state"]));
  }
  if (!problems.empty()) {
    std::string msg = path + ": invalid checkpoint manifest (" + std::to_string(problems.size()) +
                      (problems.size() == 1 ? " problem):" : " problems):");
    for (size_t i = 0; i < problems.size() && i < kMaxShownProblems; ++i) msg += "\n  " + problems[i];
    if (problems.size() > kMaxShownProblems)
      msg += "\n  ... and " + std::to_string(problems.size() - kMaxShownProblems) + " more";
    throw Error(msg);
  }
  return out;
}

CheckpointManifest read_checkpoint_manifest(const std::string& tag_dir) {
  const std::string path = tag_dir + "/manifest.json";
  if (!fs::exists(path)) throw Error(tag_dir + ": not a checkpoint (no manifest.json)");
  return parse_checkpoint_manifest(fs::read_regular_file(path, kMaxManifestBytes, "the checkpoint manifest"), path);
}

std::string manifest_to_json_text(const CheckpointManifest& c) {
  json m;
  m["format"] = kCheckpointFormat;
  m["version"] = c.version;
  m["tag"] = c.tag;
  m["global_steps"] = c.global_steps;
  m["micro_steps"] = c.micro_steps;
  m["skipped_steps"] = c.skipped_steps;
  m["zero_stage"] = c.zero_stage;
  m["offload"] = {{"optimizer", c.offload_optimizer}, {"param", c.offload_param}};
  m["data_parallel_size"] = c.data_parallel_size;
  m["model_dtype"] = c.model_dtype;
  json params = json::array();
  for (const auto& p : c.params) {
    json param = {{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}};
    if (p.split.parts > 1)
      param["split"] = {{"dim", p.split.dim}, {"blocks", p.split.blocks}, {"parts", p.split.parts}, {"padded", p.split.padded}};
    params.push_back(param);
  }
  m["params"] = params;
  json shards = json::array();
  for (const auto& s : c.shards) {
    json fragments = json::array();
    for (const auto& f : s.fragments) {
      if (c.params[static_cast<size_t>(f.param)].split.parts > 1) fragments.push_back({f.param, f.start, f.numel, f.piece});
      else fragments.push_back({f.param, f.start, f.numel});
    }
    json shard = {{"file", s.file}, {"rank", s.rank}, {"fragments", fragments}};
    if (c.has_checksums()) {
      json sums = json::object();
      for (const auto& [name, crc] : s.checksums) sums[name] = crc32c_hex(crc);
      shard["checksums"] = sums;
    }
    shards.push_back(shard);
  }
  m["shards"] = shards;
  m["checksum"] = "crc32c of each tensor's bytes, per shard";
  m["topology"] = {{"data_parallel", c.data_parallel_size},
                   {"pipeline_parallel", c.pipeline_stages},
                   {"tensor_parallel", c.tensor_parallel_size}};
  if (c.pipeline_stages > 1) m["pipeline"] = {{"stages", c.pipeline_stages}, {"layer_stages", c.layer_stages}};
  if (c.tensor_parallel_size > 1) m["tensor_parallel"] = {{"size", c.tensor_parallel_size}};
  if (c.expert_parallel_size > 1) m["expert_parallel"] = {{"size", c.expert_parallel_size}};
  m["rng"] = "per rank, in each shard as tensor 'rng|cpu' (torch's CPU generator state)";
  m["adam_step"] = c.adam_step;
  m["lr_scheduler"] = {{"last_batch_iteration", c.lr_last_batch_iteration}};
  const auto& ls = c.loss_scaler;
  m["loss_scaler"] = {{"cur_scale", ls.cur_scale},
                      {"cur_iter", ls.cur_iter},
                      {"last_overflow_iter", ls.last_overflow_iter},
                      {"cur_hysteresis", ls.cur_hysteresis},
                      {"overflows_at_min", ls.overflows_at_min}};
  m["client_state"] = c.client_state;
  if (!c.routing.empty()) m["routing"] = c.routing;
  return m.dump(2);
}

}  // namespace stratum
