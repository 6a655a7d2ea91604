// stratum-run's inputs: the hostfile parser, then --include/--exclude,
// --num_nodes and --num_gpus applied to its hosts (select_resources). Lines
// "@include S", "@exclude S", "@num_nodes N", "@per_node N" of the input are
// the flags (no host name starts with '@'); the other lines are the hostfile.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stratum/core/error.h"
#include "stratum/distributed/launch/hostfile.h"
#include "stratum/distributed/launch/resources.h"

namespace launch = stratum::distributed::launch;

namespace {

bool take(std::string_view line, std::string_view tag, std::string& out) {
  if (line.substr(0, tag.size()) != tag) return false;
  out = std::string(line.substr(tag.size()));
  return true;
}

int small_number(const std::string& s) {
  int v = 0;
  for (char c : s.substr(0, 6))
    if (c >= '0' && c <= '9') v = v * 10 + (c - '0');
  return s.size() > 0 && s[0] == '-' ? -v : v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string hostfile, value;
  launch::SelectionRequest request;
  size_t pos = 0;
  while (pos <= input.size()) {
    const size_t nl = input.find('\n', pos);
    const std::string_view line = input.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? input.size() + 1 : nl + 1;
    if (take(line, "@include ", request.include) || take(line, "@exclude ", request.exclude)) continue;
    if (take(line, "@num_nodes ", value)) {
      request.num_nodes = small_number(value);
      continue;
    }
    if (take(line, "@per_node ", value)) {
      request.per_node = small_number(value);
      continue;
    }
    hostfile.append(line);
    hostfile.push_back('\n');
  }
  try {
    const auto entries = launch::parse_hostfile(hostfile, "fuzz.hostfile");
    const auto selected = launch::select_resources(launch::pool_from_hostfile(entries), request);
    for (const auto& host : selected)
      if (host.slots.size() != host.devices.size() || host.slots.empty()) __builtin_trap();
  } catch (const stratum::Error&) {
  }
  return 0;
}
