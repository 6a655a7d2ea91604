#pragma once
// Errors that carry their context (file, key, rank) in the message, so that a
// user reading one line knows what to fix.
#include <stdexcept>
#include <string>
#include <vector>

namespace stratum {

// Base of every error Stratum throws on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// One or more problems in a configuration; each line names its JSON path.
class ConfigError : public Error {
 public:
  ConfigError(std::string source, std::vector<std::string> problems);
  const std::string& source() const { return source_; }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::string source_;
  std::vector<std::string> problems_;
};

}  // namespace stratum
