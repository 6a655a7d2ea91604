#include "stratum/config/partition_pattern.h"

#include <cctype>

#include "stratum/core/error.h"
#include "stratum/core/shorten.h"

namespace stratum::config {

std::regex compile_partition_pattern(const std::string& pattern) {
  if (pattern.size() > kMaxPartitionPatternLength)
    throw Error("the regular expression has " + std::to_string(pattern.size()) + " characters, over the " +
                std::to_string(kMaxPartitionPatternLength) + " allowed (it is matched against layer kinds such as "
                "\"GPT2Block\")");
  int depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      ++i;  // an escaped character opens nothing
    } else if (c == '[') {
      // A bracket expression: its '(' and '{' are literal.
      size_t j = i + 1;
      if (j < pattern.size() && pattern[j] == '^') ++j;
      if (j < pattern.size() && pattern[j] == ']') ++j;
      while (j < pattern.size() && pattern[j] != ']') j += pattern[j] == '\\' ? 2 : 1;
      i = j;
    } else if (c == '(') {
      if (++depth > kMaxPartitionPatternDepth)
        throw Error("the regular expression nests groups deeper than " + std::to_string(kMaxPartitionPatternDepth) +
                    " (at character " + std::to_string(i) + ")");
    } else if (c == ')') {
      depth = depth > 0 ? depth - 1 : 0;
    } else if (c == '{') {
      // {n} and {n,m}: std::regex copies the repeated part n (or m) times.
      long value = 0;
      for (size_t j = i + 1; j < pattern.size() && (std::isdigit(static_cast<unsigned char>(pattern[j])) || pattern[j] == ','); ++j) {
        if (pattern[j] == ',') {
          value = 0;
          continue;
        }
        value = std::min<long>(value * 10 + (pattern[j] - '0'), kMaxPartitionPatternRepeat + 1);
        if (value > kMaxPartitionPatternRepeat)
          throw Error("the regular expression repeats a part " + shorten_for_message(pattern.substr(i, j - i + 1)) +
                      "... times, over the " + std::to_string(kMaxPartitionPatternRepeat) + " allowed (at character " +
                      std::to_string(i) + ")");
      }
    }
  }
  try {
    return std::regex(pattern, std::regex::icase);
  } catch (const std::regex_error& e) {
    throw Error(std::string("invalid regular expression: ") + e.what());
  }
}

}  // namespace stratum::config
