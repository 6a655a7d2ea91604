#pragma once
// Rank-aware logging: every line is prefixed with the rank once the process
// knows it, so interleaved output from many ranks stays readable.
#include <string>

namespace stratum::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

// Called once the rank is known (distributed::init). Before that lines carry no prefix.
void set_rank(int rank);
// STRATUM_LOG_LEVEL=debug|info|warn|error overrides the default (info).
void set_level(Level level);
Level level();

void write(Level level, const std::string& message);
inline void debug(const std::string& m) { write(Level::debug, m); }
inline void info(const std::string& m) { write(Level::info, m); }
inline void warn(const std::string& m) { write(Level::warn, m); }
inline void error(const std::string& m) { write(Level::error, m); }

}  // namespace stratum::log
