#include "stratum/config/key_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "stratum/core/shorten.h"

namespace stratum::config {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string range_text(double min, double max, bool min_exclusive) {
  const bool has_min = std::isfinite(min), has_max = std::isfinite(max);
  if (has_min && has_max) {
    if (min_exclusive) return "a number in (" + format_number(min) + ", " + format_number(max) + "]";
    return "a number in [" + format_number(min) + ", " + format_number(max) + "]";
  }
  if (has_min) return std::string(min_exclusive ? "a number > " : "a number >= ") + format_number(min);
  return "a number <= " + format_number(max);
}

std::string int_range_text(int64_t min, int64_t max) {
  if (min != KeyReader::kIntMin && max != KeyReader::kIntMax)
    return std::to_string(min) + ".." + std::to_string(max);
  if (min != KeyReader::kIntMin) return "an integer >= " + std::to_string(min);
  return "an integer <= " + std::to_string(max);
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "a list";
    default: return "a number";
  }
}

}  // namespace

namespace {
enum class Switch { off, on, none };

// A section's own "enabled" decides; without one, its sub-sections do (any on:
// on; else any off: off); settings without a switch anywhere decide nothing.
Switch switch_state(const Json& section, int depth) {
  if (!section.is_object() || depth > 16) return Switch::none;
  if (auto it = section.find("enabled"); it != section.end()) return *it == false ? Switch::off : Switch::on;
  Switch state = Switch::none;
  for (const auto& child : section) {
    const Switch s = switch_state(child, depth + 1);
    if (s == Switch::on) return Switch::on;
    if (s == Switch::off) state = Switch::off;
  }
  return state;
}
}  // namespace

bool switched_off(const Json& section) { return switch_state(section, 0) == Switch::off; }

std::vector<std::string> Diagnostics::all_errors() const {
  std::vector<std::string> out = errors;
  if (more_errors > 0)
    out.push_back("... and " + std::to_string(more_errors) + " more problem" + (more_errors == 1 ? "" : "s") +
                  " (only the first " + std::to_string(kMaxErrors) + " are listed)");
  return out;
}

std::string short_name(const std::string& key) { return shorten_for_message(key, kMaxShownKeyLength); }

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  if (word.size() > kMaxShownKeyLength) return best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    // A candidate that contains the word (or the reverse) is a likely intent too.
    if (d >= best_distance && word.size() >= 4 &&
        (lower(c).find(lower(word)) != std::string::npos || lower(word).find(lower(c)) != std::string::npos))
      d = best_distance - 1;
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string m = closest_match(word, candidates);
  return m.empty() ? "" : " (did you mean '" + m + "'?)";
}

std::string show(const Json& value) {
  if (value.is_object()) return "{...}";
  if (value.is_array()) return "[...]";
  // A long string is cut before it is dumped (a megabyte value is not copied per
  // message), before a UTF-8 character rather than inside one (dump() would throw).
  if (value.is_string() && value.get_ref<const std::string&>().size() > 60) {
    const std::string& text = value.get_ref<const std::string&>();
    size_t cut = 56;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    std::string s = Json(text.substr(0, cut)).dump();
    s.pop_back();  // the closing quote: the string goes on
    return s + "...";
  }
  std::string s = value.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

KeyReader::KeyReader(const Json* object, std::string path, Diagnostics& diag)
    : object_(object), path_(std::move(path)), diag_(diag) {}

bool KeyReader::has(const std::string& key) const {
  return object_ && object_->contains(resolved_name(key));
}

// Paths are for messages only: a long key is shown shortened.
std::string KeyReader::path_of(const std::string& key) const {
  return path_.empty() ? short_name(key) : path_ + "." + short_name(key);
}

std::string KeyReader::resolved_name(const std::string& key) const {
  for (const auto& [new_key, old_key] : aliases_)
    if (new_key == key) return old_key;
  return key;
}

const Json* KeyReader::lookup(const std::string& key) {
  known_.push_back(key);
  if (!object_) return nullptr;
  const std::string name = resolved_name(key);
  auto it = object_->find(name);
  if (it == object_->end()) return nullptr;
  consumed_.insert(name);
  if (it->is_null()) return nullptr;  // null is Python's None: "not given", as in DeepSpeed
  if (it->is_string() && it->get<std::string>() == "auto") {
    diag_.error(path_of(name),
                "\"auto\" is a placeholder that the Hugging Face Trainer fills in; Stratum needs an explicit "
                "value here");
    return nullptr;
  }
  return &*it;
}

bool KeyReader::get_bool(const std::string& key, bool def) { return get_opt_bool(key).value_or(def); }

std::optional<bool> KeyReader::get_opt_bool(const std::string& key) {
  const Json* v = lookup(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    diag_.error(path_of(resolved_name(key)), std::string("expected true or false, got ") + show(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

int64_t KeyReader::get_int(const std::string& key, int64_t def, int64_t min, int64_t max) {
  return get_opt_int(key, min, max).value_or(def);
}

std::optional<int64_t> KeyReader::get_opt_int(const std::string& key, int64_t min, int64_t max) {
  const Json* v = lookup(key);
  if (!v) return std::nullopt;
  const std::string p = path_of(resolved_name(key));
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(kIntMax)) {
      diag_.error(p, "integer " + show(*v) + " is too large");
      return std::nullopt;
    }
    value = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) {
      diag_.error(p, "expected an integer, got " + show(*v));
      return std::nullopt;
    }
    // 2^63 is exact as a double; converting anything from there on is undefined.
    if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
      diag_.error(p, "integer " + show(*v) + " does not fit in 64 bits (at most 9223372036854775807)");
      return std::nullopt;
    }
    value = static_cast<int64_t>(d);
  } else {
    diag_.error(p, std::string("expected an integer, got ") + type_name(*v) + " " + show(*v));
    return std::nullopt;
  }
  if (value < min || value > max) {
    diag_.error(p, "expected " + int_range_text(min, max) + ", got " + std::to_string(value));
    return std::nullopt;
  }
  return value;
}

double KeyReader::get_double(const std::string& key, double def, double min, double max, bool min_exclusive) {
  return get_opt_double(key, min, max, min_exclusive).value_or(def);
}

std::optional<double> KeyReader::get_opt_double(const std::string& key, double min, double max,
                                                bool min_exclusive) {
  const Json* v = lookup(key);
  if (!v) return std::nullopt;
  const std::string p = path_of(resolved_name(key));
  if (!v->is_number()) {
    diag_.error(p, std::string("expected a number, got ") + type_name(*v) + " " + show(*v));
    return std::nullopt;
  }
  double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max || (min_exclusive && d == min)) {
    diag_.error(p, "expected " + range_text(min, max, min_exclusive) + ", got " + show(*v));
    return std::nullopt;
  }
  return d;
}

std::string KeyReader::get_string(const std::string& key, const std::string& def) {
  const Json* v = lookup(key);
  if (!v) return def;
  if (!v->is_string()) {
    diag_.error(path_of(resolved_name(key)), std::string("expected a string, got ") + type_name(*v) + " " + show(*v));
    return def;
  }
  return v->get<std::string>();
}

std::string KeyReader::get_enum(const std::string& key, const std::string& def,
                                const std::vector<std::string>& allowed, bool ignore_case) {
  const Json* v = lookup(key);
  if (!v) return def;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  const std::string p = path_of(resolved_name(key));
  if (!v->is_string()) {
    diag_.error(p, "expected one of " + list + ", got " + show(*v));
    return def;
  }
  const std::string s = v->get<std::string>();
  for (const auto& a : allowed)
    if (s == a || (ignore_case && lower(s) == lower(a))) return a;
  diag_.error(p, "expected one of " + list + ", got \"" + short_name(s) + "\"" + did_you_mean(s, allowed));
  return def;
}

std::vector<std::string> KeyReader::get_string_list(const std::string& key) {
  const Json* v = lookup(key);
  std::vector<std::string> out;
  if (!v) return out;
  const std::string p = path_of(resolved_name(key));
  if (!v->is_array()) {
    diag_.error(p, std::string("expected a list of strings, got ") + type_name(*v) + " " + show(*v));
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string())
      diag_.error(p + "[" + std::to_string(i) + "]", "expected a string, got " + show((*v)[i]));
    else
      out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::vector<double> KeyReader::get_number_list(const std::string& key, const std::vector<double>& def,
                                               size_t size) {
  const Json* v = lookup(key);
  if (!v) return def;
  const std::string p = path_of(resolved_name(key));
  if (!v->is_array() || v->size() != size) {
    diag_.error(p, "expected a list of " + std::to_string(size) + " numbers, got " + show(*v));
    return def;
  }
  std::vector<double> out;
  for (size_t i = 0; i < size; ++i) {
    if (!(*v)[i].is_number()) {
      diag_.error(p + "[" + std::to_string(i) + "]", "expected a number, got " + show((*v)[i]));
      return def;
    }
    out.push_back((*v)[i].get<double>());
  }
  return out;
}

KeyReader KeyReader::child(const std::string& key) {
  const Json* v = lookup(key);
  const std::string p = path_of(resolved_name(key));
  if (v && !v->is_object()) {
    diag_.error(p, std::string("expected an object {...}, got ") + type_name(*v) + " " + show(*v));
    v = nullptr;
  }
  return KeyReader(v, p, diag_);
}

void KeyReader::unsupported(const std::string& key, const Json& deepspeed_default, const std::string& hint,
                            const std::string& origin) {
  const Json* v = lookup(key);
  if (!v || *v == deepspeed_default) return;
  // 1 and 1.0 are the same setting.
  if (v->is_number() && deepspeed_default.is_number() && v->get<double>() == deepspeed_default.get<double>()) return;
  std::string msg = origin + " option not supported by Stratum yet (only its default " +
                    show(deepspeed_default) + " is accepted)";
  if (!hint.empty()) msg += "; " + hint;
  diag_.error(path_of(key), msg);
}

void KeyReader::unsupported_section(const std::string& key, const std::string& feature) {
  const Json* v = lookup(key);
  if (!v) return;
  if (v->is_object() && (v->empty() || switched_off(*v))) return;
  if (v->is_boolean() && !v->get<bool>()) return;
  diag_.error(path_of(key), "DeepSpeed feature '" + feature + "' is not supported by Stratum yet; remove the section");
}

void KeyReader::noted(const std::string& key, const Json& quiet, const std::string& note) {
  // After a getter validated the key: its value again, without a second "auto" report.
  const Json* v = nullptr;
  if (object_ && consumed_.count(resolved_name(key))) {
    const Json& found = object_->at(resolved_name(key));
    if (!found.is_null() && found != "auto") v = &found;
  } else {
    v = lookup(key);
  }
  if (!v) return;
  if (!quiet.is_null() && (*v == quiet || (v->is_number() && quiet.is_number() && v->get<double>() == quiet.get<double>())))
    return;
  diag_.note(path_of(key), note);
}

const Json* KeyReader::raw(const std::string& key) { return lookup(key); }

void KeyReader::alias(const std::string& old_key, const std::string& new_key, bool deprecated) {
  if (!object_ || !object_->contains(old_key)) return;
  known_.push_back(old_key);
  if (object_->contains(new_key)) {
    consumed_.insert(old_key);
    diag_.error(path_of(old_key), "given together with '" + new_key + "', which it is another name for; keep one");
    return;
  }
  if (deprecated) diag_.note(path_of(old_key), "deprecated; use '" + new_key + "'");
  aliases_.emplace_back(new_key, old_key);
}

void KeyReader::finish() {
  if (!object_) return;
  for (auto it = object_->begin(); it != object_->end(); ++it) {
    if (consumed_.count(it.key())) continue;
    if (diag_.full()) {  // not listed: spare the did-you-mean
      ++diag_.more_errors;
      continue;
    }
    diag_.error(path_of(it.key()), "unknown key" + did_you_mean(it.key(), known_));
  }
}

}  // namespace stratum::config
