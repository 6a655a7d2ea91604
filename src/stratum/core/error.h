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
  // `notes`: what the config's accepted keys mean here (shown apart from the
  // problems by `stratum-config check`; not part of what()).
  ConfigError(std::string source, std::vector<std::string> problems, std::vector<std::string> notes = {});
  const std::string& source() const { return source_; }
  const std::vector<std::string>& problems() const { return problems_; }
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  std::string source_;
  std::vector<std::string> problems_;
  std::vector<std::string> notes_;
};

// An error the ranks of a job learned of together, by agreeing on it after a
// step that can fail on some ranks only (loading, validation, data): every
// rank throws it, so each can end cleanly instead of leaving its peers waiting.
class AgreedError : public Error {
 public:
  AgreedError(const std::string& what, bool failed_here, bool report)
      : Error(what), failed_here_(failed_here), report_(report) {}
  // This rank's own step failed (the others stop because of it).
  bool failed_here() const { return failed_here_; }
  // This rank should print it: it failed here, and it is not a repeat of the
  // same failure on every rank (then the lowest rank speaks for all).
  bool report() const { return report_; }

 private:
  bool failed_here_, report_;
};

}  // namespace stratum
