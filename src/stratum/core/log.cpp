#include "stratum/core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace stratum::log {
namespace {
int g_rank = -1;

Level level_from_env() {
  const char* v = std::getenv("STRATUM_LOG_LEVEL");
  if (!v) return Level::info;
  if (!std::strcmp(v, "debug")) return Level::debug;
  if (!std::strcmp(v, "warn")) return Level::warn;
  if (!std::strcmp(v, "error")) return Level::error;
  return Level::info;
}
Level g_level = level_from_env();
std::mutex g_mutex;

const char* tag(Level l) {
  switch (l) {
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warning";
    case Level::error: return "error";
  }
  return "";
}
}  // namespace

// stratum-run already prefixes every line of a rank with "[rank N]".
void set_rank(int rank) {
  const char* prefixed = std::getenv("STRATUM_OUTPUT_PREFIXED");
  g_rank = prefixed && std::string(prefixed) == "1" ? -1 : rank;
}
void set_level(Level level) { g_level = level; }
Level level() { return g_level; }

void write(Level l, const std::string& message) {
  if (l < g_level) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* out = l >= Level::warn ? stderr : stdout;
  if (g_rank >= 0)
    std::fprintf(out, "[rank %d] %s: %s\n", g_rank, tag(l), message.c_str());
  else
    std::fprintf(out, "%s: %s\n", tag(l), message.c_str());
  std::fflush(out);
}

}  // namespace stratum::log
