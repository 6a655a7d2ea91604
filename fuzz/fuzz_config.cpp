// The config parser: text -> stratum::Config with every check (JSON, keys,
// ranges, cross-field rules), then the batch triple and the resolved JSON for
// a few world sizes. A ConfigError is an answer; any other exception, a crash,
// a hang or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  stratum::Config config;
  try {
    config = stratum::Config::from_string(text, "fuzz.json");
  } catch (const stratum::ConfigError&) {
    return 0;
  }
  for (int64_t world : {1, 2, 3, 8, 1 << 20}) {
    try {
      config.resolve_batch(world);
      (void)stratum::to_json(config, world).dump();
    } catch (const stratum::ConfigError&) {
    }
  }
  (void)stratum::to_json(config).dump();
  return 0;
}
