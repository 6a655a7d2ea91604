// A model.safetensors.index.json from a stranger: text -> shard file -> the
// tensors it holds. A stratum::Error is an answer; any other exception, a
// crash, a hang or a sanitizer report is a bug. An accepted index names only
// plain *.safetensors files of the directory, each tensor once, within bounds.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "stratum/core/error.h"
#include "stratum/io/safetensors_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace io = stratum::io;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto shards = io::parse_safetensors_index(text, "model.safetensors.index.json");
    if (shards.empty() || shards.size() > io::kMaxSafetensorsIndexShards) __builtin_trap();
    std::set<std::string> seen;
    for (const auto& [shard, names] : shards) {
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos ||
          shard.find('\0') != std::string::npos || shard.size() <= 12 ||
          shard.compare(shard.size() - 12, 12, ".safetensors") != 0 || names.empty())
        __builtin_trap();
      for (const auto& n : names)
        if (n.empty() || !seen.insert(n).second) __builtin_trap();
    }
    if (seen.size() > io::kMaxSafetensorsIndexTensors) __builtin_trap();
  } catch (const stratum::Error&) {
  }
  return 0;
}
