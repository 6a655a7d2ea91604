#include "stratum/data/blend.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <set>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/data/token_file.h"

namespace stratum::data {

namespace {

// More sources than any blend needs: each is a mapped file and a share the
// window order tracks.
constexpr size_t kMaxBlendSources = 1024;

std::string blend_value(const std::vector<std::string>& args, size_t i) {
  return "'" + args[i] + "' (value " + std::to_string(i + 1) + ")";
}

// A weight: a finite positive number, all of the text.
double parse_weight(const std::vector<std::string>& args, size_t i) {
  char* end = nullptr;
  const double w = std::strtod(args[i].c_str(), &end);
  if (end == args[i].c_str() || *end != '\0' || !std::isfinite(w) || w <= 0)
    throw Error("--data: " + blend_value(args, i) + " is not a positive weight; a blend is "
                "weight and path pairs (\"0.7 a 0.3 b\")");
  return w;
}

}  // namespace

std::vector<BlendSource> parse_blend(const std::vector<std::string>& args) {
  if (args.size() == 1) return {BlendSource{1.0, args[0]}};
  if (args.empty() || args.size() % 2 != 0)
    throw Error("--data: " + std::to_string(args.size()) +
                " values; a blend is weight and path pairs (\"0.7 a 0.3 b\"), or one path");
  if (args.size() / 2 > kMaxBlendSources)
    throw Error("--data: a blend of " + std::to_string(args.size() / 2) + " sources; at most " +
                std::to_string(kMaxBlendSources) + " (merge small sources into one file)");
  std::vector<BlendSource> out;
  std::set<std::string> seen;
  double total = 0;
  for (size_t i = 0; i < args.size(); i += 2) {
    const double w = parse_weight(args, i);
    if (!seen.insert(args[i + 1]).second) throw Error("--data: " + args[i + 1] + " is given twice");
    // A sum past a double's range would make every share 0.
    if (!std::isfinite(total + w))
      throw Error("--data: " + blend_value(args, i) + " brings the sum of the weights past a double's range "
                  "(1.8e308); weights are proportions: scale them down (\"0.7 a 0.3 b\")");
    out.push_back({w, args[i + 1]});
    total += w;
  }
  for (size_t k = 0; k < out.size(); ++k) {
    out[k].weight /= total;
    if (!(out[k].weight > 0)) {
      char sum[32];
      std::snprintf(sum, sizeof sum, "%.6g", total);
      throw Error("--data: " + blend_value(args, 2 * k) + " is 0 next to the sum of the weights (" + sum +
                  "); its source would never be drawn");
    }
  }
  return out;
}

std::string blend_token_files(const std::vector<BlendSource>& sources, int64_t window, const std::string& cache_dir,
                              bool may_write) {
  if (sources.empty()) throw Error("blend: no sources");
  if (sources.size() == 1) return sources[0].path;
  if (window < 1) throw Error("blend: window of " + std::to_string(window) + " tokens");
  uint64_t h = 1469598103934665603ull;  // FNV-1a of what decides the blend
  auto mix = [&](const std::string& s) {
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  };
  mix(std::to_string(window));
  for (const auto& s : sources) {
    char w[32];
    std::snprintf(w, sizeof w, "%.17g", s.weight);
    mix(w), mix(fs::absolute_path(s.path));
    struct stat st {};  // a source rebuilt since makes another blend
    if (::stat(s.path.c_str(), &st) == 0) mix(std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime));
  }
  char name[64];
  std::snprintf(name, sizeof name, "blend.%016llx.strtok", static_cast<unsigned long long>(h));
  const std::string out = (cache_dir.empty() ? std::string(".") : cache_dir) + "/" + name;
  if (!may_write) return out;
  std::vector<TokenFile> files;
  for (const auto& s : sources) files.emplace_back(s.path);
  // Documents: each window begins one, and the source's own starts within it
  // begin others; only when every source has a document index.
  bool indexed = true;
  for (const auto& f : files) indexed = indexed && has_document_index(f.path(), f.size());
  if (fs::exists(out)) {
    try {
      if (!indexed || has_document_index(out, TokenFile(out).size())) return out;
    } catch (const Error&) {  // damaged: rebuilt
    }
  }
  std::vector<std::vector<int64_t>> starts(files.size());
  if (indexed)
    for (size_t i = 0; i < files.size(); ++i) starts[i] = read_document_index(files[i]);
  int64_t windows = 0, vocab = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].tokenizer_name() != files[0].tokenizer_name())
      throw Error("--data: " + sources[i].path + " was tokenized by '" + files[i].tokenizer_name() + "' but " +
                  sources[0].path + " by '" + files[0].tokenizer_name() + "'; a blend needs one tokenizer");
    if (files[i].size() < window)
      throw Error("--data: " + sources[i].path + " holds " + std::to_string(files[i].size()) +
                  " tokens, fewer than one window of " + std::to_string(window));
    windows += files[i].size() / window;
    vocab = std::max(vocab, files[i].vocab_size());
  }
  if (!cache_dir.empty()) fs::make_directories(cache_dir);
  TokenFileWriter writer(out, files[0].tokenizer_name(), vocab);
  std::vector<int64_t> taken(files.size(), 0), next(files.size(), 0);
  std::vector<int64_t> buffer(static_cast<size_t>(window));
  std::vector<int32_t> ids(static_cast<size_t>(window));
  for (int64_t k = 0; k < windows; ++k) {
    // The source furthest behind its share of the k + 1 windows so far.
    size_t pick = 0;
    double behind = -1e300;
    for (size_t i = 0; i < files.size(); ++i) {
      const double gap = sources[i].weight * static_cast<double>(k + 1) - static_cast<double>(taken[i]);
      if (gap > behind) behind = gap, pick = i;
    }
    if ((next[pick] + 1) * window > files[pick].size()) next[pick] = 0;  // this source starts over
    files[pick].read(next[pick] * window, window, buffer.data());
    for (int64_t t = 0; t < window; ++t) {
      const int64_t id = buffer[static_cast<size_t>(t)];
      // A file's ids are not checked on reading; narrowing one past int32 would wrap.
      if (id >= files[pick].vocab_size())
        throw Error("--data: " + sources[pick].path + ": token " + std::to_string(next[pick] * window + t) + " is " +
                    std::to_string(id) + ", outside its vocabulary of " + std::to_string(files[pick].vocab_size()));
      ids[static_cast<size_t>(t)] = static_cast<int32_t>(id);
    }
    if (!indexed) {
      writer.append(ids);
    } else {
      const int64_t base = next[pick] * window;
      const auto& s = starts[pick];
      int64_t done = 0;
      writer.begin_document();
      for (auto it = std::upper_bound(s.begin(), s.end(), base); it != s.end() && *it < base + window; ++it) {
        writer.append(ids.data() + done, static_cast<size_t>(*it - base - done));
        writer.begin_document();
        done = *it - base;
      }
      writer.append(ids.data() + done, static_cast<size_t>(window - done));
    }
    ++next[pick], ++taken[pick];
  }
  writer.commit();
  return out;
}

}  // namespace stratum::data
