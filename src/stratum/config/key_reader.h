#pragma once
// Reading one JSON object of a ds_config.json, strictly: each getter checks the
// type and range of its key and records a problem (with the JSON path) instead
// of throwing, so that one pass reports every problem at once. finish() names
// the keys nobody asked for, with a did-you-mean.
//
// Every key falls in one of four classes (docs/config_policy.md):
//   error        a bad value, a contradiction, or a key neither DeepSpeed nor
//                Stratum knows (finish(), with a did-you-mean);
//   noted        accepted with a one-line note saying what Stratum does: keys
//                DeepSpeed ignores or has deprecated, permissions, behaviour
//                Stratum has anyway (noted());
//   implemented  read by a getter and acted on;
//   refused      a DeepSpeed feature Stratum does not have, named as such at
//                any value but the one that changes nothing (unsupported(),
//                unsupported_section()).
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stratum::config {

using Json = nlohmann::json;

// Every problem (errors) and every note the user should see (notes). A
// config of a million unknown keys must not make a message of a million lines:
// past kMaxErrors the rest are only counted (more_errors).
struct Diagnostics {
  static constexpr size_t kMaxErrors = 100;
  std::vector<std::string> errors;
  std::vector<std::string> notes;
  size_t more_errors = 0;
  bool full() const { return errors.size() >= kMaxErrors; }
  void error(const std::string& path, const std::string& message) {
    if (full()) ++more_errors;
    else errors.push_back(path + ": " + message);
  }
  void note(const std::string& path, const std::string& message) {
    if (notes.size() < kMaxErrors) notes.push_back(path + ": " + message);
  }
  // errors, plus a last line "... and N more problems" when some were only counted.
  std::vector<std::string> all_errors() const;
};

// Keys (and names) longer than this are shown shortened and get no
// did-you-mean: no real key is this long, and the edit distance grows with it.
inline constexpr size_t kMaxShownKeyLength = 64;
// `key` itself, or its first 40 characters + "... (N characters)" when it is
// longer than kMaxShownKeyLength.
std::string short_name(const std::string& key);

// The closest candidate to `word` by edit distance, or "" if none is close
// (always "" for a word longer than kMaxShownKeyLength).
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// Short rendering of a JSON value for messages ("4", "\"yes\"", "{...}").
std::string show(const Json& value);
// A DeepSpeed feature section that is present but off: its "enabled" is false,
// or it has none and its sub-sections are off ("compression_training":
// {"weight_quantization": {"shared_parameters": {"enabled": false}, ...}}).
bool switched_off(const Json& section);

class KeyReader {
 public:
  static constexpr int64_t kIntMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // `object` may be null (section absent: every getter returns its default).
  KeyReader(const Json* object, std::string path, Diagnostics& diag);

  bool present() const { return object_ != nullptr; }
  bool has(const std::string& key) const;
  std::string path_of(const std::string& key) const;
  Diagnostics& diagnostics() { return diag_; }

  bool get_bool(const std::string& key, bool def);
  std::optional<bool> get_opt_bool(const std::string& key);
  // Integers written as floats with no fraction (5e8) are accepted, as DeepSpeed does.
  int64_t get_int(const std::string& key, int64_t def, int64_t min = kIntMin, int64_t max = kIntMax);
  std::optional<int64_t> get_opt_int(const std::string& key, int64_t min = kIntMin, int64_t max = kIntMax);
  double get_double(const std::string& key, double def, double min = -kInf, double max = kInf,
                    bool min_exclusive = false);
  std::optional<double> get_opt_double(const std::string& key, double min = -kInf, double max = kInf,
                                       bool min_exclusive = false);
  std::string get_string(const std::string& key, const std::string& def);
  // One of `allowed` (compared case-insensitively when `ignore_case`); returns the canonical spelling.
  std::string get_enum(const std::string& key, const std::string& def, const std::vector<std::string>& allowed,
                       bool ignore_case = false);
  std::vector<std::string> get_string_list(const std::string& key);
  std::vector<double> get_number_list(const std::string& key, const std::vector<double>& def, size_t size);

  // A nested object; an absent key gives a reader with present() == false.
  KeyReader child(const std::string& key);

  // A key DeepSpeed knows and Stratum does not implement: accepted only at
  // DeepSpeed's default (which changes nothing), named as unsupported otherwise.
  // `origin`: whose option it is, in the message ("peft" for the lora section's).
  void unsupported(const std::string& key, const Json& deepspeed_default, const std::string& hint = "",
                   const std::string& origin = "DeepSpeed");
  // A whole DeepSpeed feature section: accepted only when absent, empty, false,
  // or switched off (every "enabled" in it, at any depth, false).
  void unsupported_section(const std::string& key, const std::string& feature);
  // Accepted at any value, with `note` (what Stratum does instead) recorded
  // when the key is present with a value other than `quiet` (DeepSpeed's
  // default, which needs no note; null: every present value gets the note).
  void noted(const std::string& key, const Json& quiet, const std::string& note);
  // The key is known and consumed by the caller, which reads raw() itself.
  const Json* raw(const std::string& key);
  // `old_key` is a deprecated spelling of `new_key` (in the same object): reading
  // `new_key` afterwards finds the value under either name; both given is an error.
  void alias(const std::string& old_key, const std::string& new_key, bool deprecated);

  // Records "unknown key" for every key no getter asked about.
  void finish();

 private:
  // The value of `key` if present and not "auto"; marks the key known.
  const Json* lookup(const std::string& key);
  std::string resolved_name(const std::string& key) const;

  const Json* object_;
  std::string path_;
  Diagnostics& diag_;
  std::vector<std::string> known_;
  std::set<std::string> consumed_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // (new, old) when old was used
};

}  // namespace stratum::config
