#include "stratum/pipeline/partition.h"

#include <algorithm>
#include <numeric>
#include <regex>

#include "stratum/config/partition_pattern.h"
#include "stratum/core/error.h"

namespace stratum::pipeline {
namespace {

// The fewest contiguous parts with no part heavier than `cap`, each holding at
// least one counted layer (`counted`); filled from the left. Empty when `cap`
// needs more than `parts` parts.
std::vector<size_t> fill_left(const std::vector<int64_t>& w, const std::vector<bool>& counted, int parts, int64_t cap) {
  const size_t n = w.size();
  // counted layers at or after i, for the "enough left for the other parts" rule.
  std::vector<int> counted_from(n + 1, 0);
  for (size_t i = n; i-- > 0;) counted_from[i] = counted_from[i + 1] + (counted[i] ? 1 : 0);
  std::vector<size_t> bounds{0};
  size_t i = 0;
  for (int k = 0; k < parts; ++k) {
    const int after = parts - k - 1;  // parts still to fill once this one closes
    if (after == 0) {
      int64_t rest = 0;
      for (size_t j = i; j < n; ++j) rest += w[j];
      if (rest > cap || counted_from[i] == 0) return {};
      bounds.push_back(n);
      return bounds;
    }
    int64_t sum = 0;
    bool has_counted = false;
    size_t j = i;
    // Take layers while the part stays within the cap and the parts after it
    // keep a counted layer each (before its first counted layer a part must go on).
    while (j < n) {
      if (sum + w[j] > cap) {
        if (!has_counted) return {};
        break;
      }
      if (has_counted && counted_from[j + 1] < after) break;
      sum += w[j];
      has_counted = has_counted || counted[j];
      ++j;
    }
    if (!has_counted) return {};
    bounds.push_back(j);
    i = j;
  }
  return {};
}

Partition balanced(const std::vector<int64_t>& w, const std::vector<bool>& counted, int parts) {
  int64_t lo = *std::max_element(w.begin(), w.end());
  int64_t hi = std::accumulate(w.begin(), w.end(), int64_t{0});
  std::vector<size_t> best = fill_left(w, counted, parts, hi);
  while (lo < hi) {  // the smallest cap that a left fill meets
    const int64_t mid = lo + (hi - lo) / 2;
    std::vector<size_t> b = fill_left(w, counted, parts, mid);
    if (b.empty()) {
      lo = mid + 1;
    } else {
      hi = mid;
      best = std::move(b);
    }
  }
  if (best.empty()) best = fill_left(w, counted, parts, hi);
  return Partition{best};
}

std::string plural(int64_t n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

int Partition::part_of(size_t layer) const {
  for (int k = 0; k < parts(); ++k)
    if (layer < end(k)) return k;
  throw Error("pipeline partition: layer " + std::to_string(layer) + " is past the last part (" + describe(*this) + ")");
}

Partition partition_layers(const std::vector<LayerWeight>& layers, int parts, const std::string& method,
                           const std::string& what) {
  const int64_t n = static_cast<int64_t>(layers.size());
  if (parts < 1) throw Error(what + ": " + std::to_string(parts) + " parts requested; need at least 1");
  if (n < parts)
    throw Error(what + ": the model has " + plural(n, "layer") + " but " + plural(parts, "pipeline stage") +
                " (stages x virtual stages) need at least one each; use at most " + std::to_string(n) + " stages");
  if (method == "uniform") {
    Partition p;
    const int64_t chunk = n / parts, extra = n % parts;
    p.bounds.push_back(0);
    for (int k = 0; k < parts; ++k) p.bounds.push_back(p.bounds.back() + chunk + (k < extra ? 1 : 0));
    return p;
  }
  std::vector<int64_t> w(layers.size());
  std::vector<bool> counted(layers.size(), true);
  if (method == "parameters") {
    for (size_t i = 0; i < layers.size(); ++i) {
      if (layers[i].parameters < 0)
        throw Error(what + ": layer " + std::to_string(i) + " has a negative parameter count");
      w[i] = layers[i].parameters;
    }
    if (std::accumulate(w.begin(), w.end(), int64_t{0}) == 0)
      throw Error(what + ": \"parameters\" balances trainable parameters, and the model has none; use \"uniform\"");
  } else if (method.rfind("type:", 0) == 0) {
    const std::string pattern = method.substr(5);
    std::regex re;
    try {
      re = config::compile_partition_pattern(pattern);
    } catch (const Error& e) {
      throw Error(what + ": " + e.what());
    }
    int64_t matched = 0;
    std::vector<std::string> kinds;
    for (size_t i = 0; i < layers.size(); ++i) {
      counted[i] = std::regex_search(layers[i].kind, re);
      w[i] = counted[i] ? 1 : 0;
      matched += w[i];
      if (std::find(kinds.begin(), kinds.end(), layers[i].kind) == kinds.end()) kinds.push_back(layers[i].kind);
    }
    std::string kind_list;
    for (size_t i = 0; i < kinds.size(); ++i) kind_list += (i ? ", " : "") + kinds[i];
    if (matched == 0)
      throw Error(what + ": \"" + method + "\" matches none of the model's " + plural(n, "layer") +
                  " (their kinds: " + kind_list + ")");
    if (matched < parts)
      throw Error(what + ": \"" + method + "\" matches " + plural(matched, "layer") + ", fewer than the " +
                  plural(parts, "pipeline stage") + " (stages x virtual stages), so a stage would hold none");
  } else {
    throw Error(what + ": expected \"parameters\", \"uniform\" or \"type:<regex>\", got \"" + method + "\"");
  }
  Partition p = balanced(w, counted, parts);
  if (p.parts() != parts)
    throw Error(what + ": could not cut " + plural(n, "layer") + " into " + std::to_string(parts) + " non-empty parts");
  return p;
}

std::string describe(const Partition& partition) {
  std::string s;
  for (int k = 0; k < partition.parts(); ++k) {
    if (k) s += " | ";
    const size_t b = partition.begin(k), e = partition.end(k);
    s += e - b == 1 ? std::to_string(b) : std::to_string(b) + "-" + std::to_string(e - 1);
  }
  return s;
}

}  // namespace stratum::pipeline
