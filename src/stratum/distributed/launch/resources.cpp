#include "stratum/distributed/launch/resources.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/shorten.h"
#include "stratum/distributed/launch/process.h"

namespace stratum::distributed::launch {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::optional<int> parse_int(const std::string& s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The pool's names for a message: the first few of a big pool.
std::string known_hosts(const std::vector<PoolHost>& pool) {
  constexpr size_t kShown = 10;
  std::string out;
  for (size_t i = 0; i < pool.size() && i < kShown; ++i) out += (out.empty() ? "" : ", ") + pool[i].name;
  if (pool.size() > kShown) out += " and " + std::to_string(pool.size() - kShown) + " more";
  return out;
}

// Host name -> its index in the pool, so that a long --include is not a scan of the pool per entry.
std::map<std::string, size_t> index_of(const std::vector<PoolHost>& pool) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < pool.size(); ++i) index.emplace(pool[i].name, i);
  return index;
}

std::string slot_range(int slots) {
  return slots == 1 ? "slot 0" : "slots 0-" + std::to_string(slots - 1);
}

// host name -> chosen slot set (nullopt: the whole host), in order of appearance.
struct FilterItem {
  std::string host;
  std::optional<std::set<int>> slots;
};

std::vector<FilterItem> parse_filter(const std::string& text, const std::string& flag,
                                     const std::vector<PoolHost>& pool) {
  const auto index = index_of(pool);
  std::vector<FilterItem> items;
  for (const std::string& raw : split(text, '@')) {
    const std::string part = trim(raw);
    if (part.empty())
      throw Error(flag + " '" + shorten_for_message(text) + "': empty host entry (expected 'host1:0,2@host2')");
    const auto colon = part.find(':');
    const std::string host = trim(part.substr(0, colon));
    check_hostname(host, flag);
    const auto found = index.find(host);
    if (found == index.end())
      throw Error(flag + ": unknown host '" + host + "' (known hosts: " + known_hosts(pool) + ")");
    const auto it = pool.begin() + static_cast<std::ptrdiff_t>(found->second);
    FilterItem item{host, std::nullopt};
    if (colon != std::string::npos) {
      const std::string list = part.substr(colon + 1);
      if (trim(list).empty())
        throw Error(flag + " '" + shorten_for_message(part) + "': no slots after ':' (expected e.g. '" + host + ":0,1')");
      std::set<int> slots;
      for (const std::string& s : split(list, ',')) {
        const auto v = parse_int(trim(s));
        if (!v)
          throw Error(flag + " '" + shorten_for_message(part) + "': slot '" + shorten_for_message(trim(s)) +
                      "' is not a whole number");
        if (*v < 0 || *v >= it->slots())
          throw Error(flag + ": slot " + std::to_string(*v) + " of host '" + host + "' does not exist (it has " +
                      std::to_string(it->slots()) + (it->slots() == 1 ? " slot: " : " slots: ") +
                      slot_range(it->slots()) + ")");
        slots.insert(*v);
      }
      item.slots = std::move(slots);
    }
    items.push_back(std::move(item));
  }
  return items;
}

SelectedHost take(const PoolHost& host, const std::set<int>& slots) {
  SelectedHost out{host.name, {}, {}};
  for (int s : slots) {
    out.slots.push_back(s);
    out.devices.push_back(host.devices[static_cast<size_t>(s)]);
  }
  return out;
}

std::set<int> all_slots(const PoolHost& host) {
  std::set<int> s;
  for (int i = 0; i < host.slots(); ++i) s.insert(i);
  return s;
}

}  // namespace

PoolHost make_pool_host(std::string name, int slots, std::vector<std::string> devices) {
  // The lists below are never built past the bound, whoever asks.
  if (slots < 0 || slots > kMaxSlotsPerHost || devices.size() > static_cast<size_t>(kMaxSlotsPerHost))
    throw Error("host '" + name + "': " + std::to_string(std::max<size_t>(devices.size(), slots < 0 ? 0 : slots)) +
                " slots is over the limit of " + std::to_string(kMaxSlotsPerHost) + " per host");
  if (devices.empty())
    for (int i = 0; i < slots; ++i) devices.push_back(std::to_string(i));
  return PoolHost{std::move(name), std::move(devices)};
}

std::vector<PoolHost> pool_from_hostfile(const std::vector<HostfileEntry>& entries) {
  std::vector<PoolHost> pool;
  for (const auto& e : entries) pool.push_back(make_pool_host(e.name, e.slots));
  return pool;
}

void check_selection_request(const SelectionRequest& request) {
  const bool filtered = !request.include.empty() || !request.exclude.empty();
  if (!request.include.empty() && !request.exclude.empty())
    throw Error("--include and --exclude cannot be used together; use one of them");
  if (filtered && (request.num_nodes || request.per_node))
    throw Error(std::string(request.num_nodes ? "--num_nodes" : request.per_node_flag) + " cannot be combined with " +
                (request.include.empty() ? "--exclude" : "--include") +
                " (as in DeepSpeed): name the devices with one or the other");
}

std::vector<SelectedHost> select_resources(const std::vector<PoolHost>& pool, const SelectionRequest& request) {
  if (pool.empty()) throw Error("no hosts to launch on");
  check_selection_request(request);

  std::map<std::string, std::set<int>> chosen;  // host -> slots kept
  if (!request.include.empty()) {
    const auto index = index_of(pool);
    for (auto& item : parse_filter(request.include, "--include", pool)) {
      const auto& host = pool[index.at(item.host)];
      auto& slots = chosen[item.host];
      if (!item.slots && static_cast<int>(slots.size()) == host.slots()) continue;  // "a@a@a...": already whole
      const auto add = item.slots ? *item.slots : all_slots(host);
      slots.insert(add.begin(), add.end());
    }
  } else {
    for (const auto& host : pool) chosen[host.name] = all_slots(host);
    const auto excluded =
        request.exclude.empty() ? std::vector<FilterItem>{} : parse_filter(request.exclude, "--exclude", pool);
    for (const auto& item : excluded) {
      if (!item.slots) {
        chosen[item.host].clear();
      } else {
        for (int s : *item.slots) chosen[item.host].erase(s);
      }
    }
  }

  std::vector<SelectedHost> out;
  for (const auto& host : pool) {  // hostfile order
    const auto it = chosen.find(host.name);
    if (it == chosen.end() || it->second.empty()) continue;
    out.push_back(take(host, it->second));
  }

  if (request.num_nodes) {
    const int k = *request.num_nodes;
    if (k < 1) throw Error("--num_nodes must be at least 1, got " + std::to_string(k));
    if (k > static_cast<int>(out.size()))
      throw Error("--num_nodes " + std::to_string(k) + ": only " + std::to_string(out.size()) +
                  (out.size() == 1 ? " host is" : " hosts are") + " available (" + known_hosts(pool) + ")");
    out.resize(static_cast<size_t>(k));
  }
  if (request.per_node) {
    const int n = *request.per_node;
    if (n < 1) throw Error(request.per_node_flag + " must be at least 1, got " + std::to_string(n));
    for (auto& host : out) {
      if (n > static_cast<int>(host.slots.size()))
        throw Error(request.per_node_flag + " " + std::to_string(n) + ": host '" + host.name + "' has only " +
                    std::to_string(host.slots.size()) + (host.slots.size() == 1 ? " slot" : " slots"));
      host.slots.resize(static_cast<size_t>(n));
      host.devices.resize(static_cast<size_t>(n));
    }
  }
  if (out.empty())
    throw Error(std::string(request.exclude.empty() ? "the selection" : "--exclude '" + request.exclude + "'") +
                " leaves no devices to run on");
  return out;
}

std::vector<std::string> visible_devices(const std::string& cuda_visible_devices, int count) {
  std::vector<std::string> out;
  if (count <= 0) return out;
  for (const std::string& raw : split(cuda_visible_devices, ',')) {
    const std::string entry = trim(raw);
    if (entry.empty()) break;
    if (const auto v = parse_int(entry)) {
      if (*v < 0 || *v >= count) break;  // CUDA ignores this entry and all after it
    }
    if (std::find(out.begin(), out.end(), entry) != out.end()) break;  // CUDA: duplicates invalidate the rest
    out.push_back(entry);
  }
  return out;
}

LocalGpus detect_local_gpus() {
  int count = 0;
  std::string source;
  if (const char* forced = std::getenv("STRATUM_NUM_GPUS")) {
    const auto v = parse_int(trim(forced));
    if (!v || *v < 0 || *v > kMaxSlotsPerHost)
      throw Error("STRATUM_NUM_GPUS='" + shorten_for_message(forced) + "' is not a whole number in 0.." +
                  std::to_string(kMaxSlotsPerHost));
    count = *v;
    source = "STRATUM_NUM_GPUS";
  } else {
    const std::string proc = "/proc/driver/nvidia/gpus";
    if (fs::is_directory(proc)) {
      count = static_cast<int>(fs::list_directory(proc).size());
      source = proc;
    }
    if (count == 0) {
      const auto listing = capture_output({"nvidia-smi", "-L"}, 10);
      if (listing) {
        std::istringstream in(*listing);
        for (std::string line; std::getline(in, line);)
          if (line.rfind("GPU ", 0) == 0) ++count;
        if (count > 0) source = "nvidia-smi -L";
      }
    }
  }
  LocalGpus gpus;
  gpus.source = source.empty() ? "no NVIDIA driver found" : source;
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) {
    gpus.devices = visible_devices(cvd, count);
    gpus.source += ", narrowed by CUDA_VISIBLE_DEVICES";
  } else {
    for (int i = 0; i < count; ++i) gpus.devices.push_back(std::to_string(i));
  }
  return gpus;
}

}  // namespace stratum::distributed::launch
