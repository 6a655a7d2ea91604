#include "stratum/core/error.h"

namespace stratum {
namespace {
std::string format_problems(const std::string& source, const std::vector<std::string>& problems) {
  std::string out = source + ": " + std::to_string(problems.size()) +
                    (problems.size() == 1 ? " problem" : " problems");
  for (const auto& p : problems) out += "\n  " + p;
  return out;
}
}  // namespace

ConfigError::ConfigError(std::string source, std::vector<std::string> problems, std::vector<std::string> notes)
    : Error(format_problems(source, problems)),
      source_(std::move(source)),
      problems_(std::move(problems)),
      notes_(std::move(notes)) {}

}  // namespace stratum
