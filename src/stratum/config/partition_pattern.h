#pragma once
// The regular expression of pipeline.partition_method "type:REGEX" (DeepSpeed's
// form), compiled the one way the config check and the partitioner share.
// std::regex compiles and matches by recursion, and expands counted repeats:
// a pattern nested a few thousand groups deep overflows the stack, and one like
// "(a{1000}){1000}" builds a million-state automaton. Layer kinds are short
// names ("GPT2Block|Embedding"), so the bounds below cost no real pattern.
#include <regex>
#include <string>

namespace stratum::config {

inline constexpr size_t kMaxPartitionPatternLength = 512;
inline constexpr int kMaxPartitionPatternDepth = 16;   // nested groups
inline constexpr long kMaxPartitionPatternRepeat = 64;  // n in {n} / {n,m}

// Throws stratum::Error saying what is wrong (too long, nested too deep, a
// repeat count too large, or std::regex's own complaint); case-insensitive.
std::regex compile_partition_pattern(const std::string& pattern);

}  // namespace stratum::config
