#include "stratum/data/jinja/access.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>

#include "stratum/data/jinja/text.h"

namespace stratum::data::jinja {
namespace {

std::string object_name(const Value& v) { return "'" + v.type_name() + " object'"; }

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
}

// By value: a fallback is often a temporary, which a returned reference would outlive.
Value arg(CallArgs& a, size_t i, const char* keyword, const Value& fallback) {
  if (i < a.positional.size()) return a.positional[i];
  if (keyword)
    if (const Value* k = a.keyword_arg(keyword)) return *k;
  return fallback;
}

std::string need_string(const Value& v, const char* what) {
  if (!v.is_string()) throw ValueError(std::string(what) + " must be str, not " + v.type_name());
  return v.str();
}

// Python's str.split(sep, maxsplit) / rsplit.
List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right, Budget& budget) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    std::vector<char32_t> cps;
    std::vector<size_t> at;
    decode_utf8(s, &cps, &at);
    std::vector<std::pair<size_t, size_t>> words;  // code point ranges
    for (size_t i = 0; i < cps.size();) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(at[b], at[e] - at[b]));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) parts.push_back(s.substr(at[words[k].first], at[words[k].second] - at[words[k].first]));
      parts.push_back(s.substr(at[words[maxsplit].first]));  // the rest keeps its trailing whitespace, as Python's
    } else {
      const size_t keep = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(s.substr(0, at[words[keep - 1].second]));  // the rest keeps its leading whitespace
      for (size_t k = keep; k < words.size(); ++k) parts.push_back(s.substr(at[words[k].first], at[words[k].second] - at[words[k].first]));
    }
  } else {
    const std::string d = need_string(sep, "the separator");
    if (d.empty()) throw ValueError("empty separator");
    if (!from_right) {
      size_t from = 0;
      for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
        const size_t hit = s.find(d, from);
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(from, hit - from));
        from = hit + d.size();
      }
      parts.push_back(s.substr(from));
    } else {
      size_t end = s.size();
      std::vector<std::string> reversed;
      for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
        if (end < d.size()) break;
        const size_t hit = s.rfind(d, end - d.size());
        if (hit == std::string::npos) break;
        reversed.push_back(s.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
      }
      reversed.push_back(s.substr(0, end));
      parts.assign(reversed.rbegin(), reversed.rend());
    }
  }
  budget.sequence_of(static_cast<int64_t>(parts.size()));
  List out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

List splitlines(const std::string& s, bool keepends) {
  List out;
  std::vector<char32_t> cps;
  std::vector<size_t> at;
  decode_utf8(s, &cps, &at);
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    out.emplace_back(s.substr(at[start], at[keepends ? end : i] - at[start]));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) out.emplace_back(s.substr(at[start]));
  return out;
}

bool affix_matches(const std::string& s, const Value& affix, bool at_start) {
  auto one = [&](const Value& a) {
    const std::string x = need_string(a, at_start ? "startswith's argument" : "endswith's argument");
    return x.size() <= s.size() && (at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (affix.is_list()) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

template <typename Pred>
bool all_chars(const std::string& s, Pred p) {
  if (s.empty()) return false;
  for (char c : s)
    if (!p(static_cast<unsigned char>(c))) return false;
  return true;
}

Value string_method(const Value& self, const std::string& name, Budget& budget) {
  const std::string& s = self.str();
  auto method = [&](auto body) {
    return Value::function("str." + name, [self, body, &budget](CallArgs& a) -> Value { return body(self.str(), a, budget); });
  };
  static const Value kNone = Value::none();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return method([left, right](const std::string& str, CallArgs& a, Budget&) -> Value {
      const Value& chars = arg(a, 0, "chars", kNone);
      if (chars.is_none() || chars.is_undefined()) return Value(py_strip(str, left, right));
      return Value(py_strip_chars(str, need_string(chars, "the characters to strip"), left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return method([right](const std::string& str, CallArgs& a, Budget& b) -> Value {
      const Value& maxsplit = arg(a, 1, "maxsplit", Value(int64_t{-1}));
      if (!maxsplit.is_int()) throw ValueError("maxsplit must be an int");
      return Value::list(split(str, arg(a, 0, "sep", kNone), maxsplit.as_int(), right, b));
    });
  }
  if (name == "splitlines")
    return method([](const std::string& str, CallArgs& a, Budget&) -> Value {
      return Value::list(splitlines(str, arg(a, 0, "keepends", Value(false)).truthy()));
    });
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return method([start](const std::string& str, CallArgs& a, Budget&) -> Value {
      if (a.positional.empty()) throw ValueError("startswith/endswith takes an argument");
      return Value(affix_matches(str, a.positional[0], start));
    });
  }
  if (name == "upper") return method([](const std::string& str, CallArgs&, Budget&) -> Value { return Value(ascii_upper(str)); });
  if (name == "lower") return method([](const std::string& str, CallArgs&, Budget&) -> Value { return Value(ascii_lower(str)); });
  if (name == "title") return method([](const std::string& str, CallArgs&, Budget&) -> Value { return Value(py_title(str)); });
  if (name == "capitalize")
    return method([](const std::string& str, CallArgs&, Budget&) -> Value { return Value(py_capitalize(str)); });
  if (name == "replace")
    return method([](const std::string& str, CallArgs& a, Budget& b) -> Value {
      const std::string old = need_string(arg(a, 0, nullptr, kNone), "replace's first argument");
      const std::string with = need_string(arg(a, 1, nullptr, kNone), "replace's second argument");
      const Value& count_v = arg(a, 2, "count", Value(int64_t{-1}));
      int64_t count = count_v.is_int() ? count_v.as_int() : -1;
      std::string out;
      if (old.empty()) {  // Python puts `with` before each code point and at the end
        const std::vector<size_t> at = code_point_offsets(str);
        for (size_t i = 0; i < at.size(); ++i) {
          if (count != 0) {
            out += with;
            --count;
          }
          if (i + 1 < at.size()) out.append(str, at[i], at[i + 1] - at[i]);
          b.string_of(out.size());
        }
        return Value(out);
      }
      size_t from = 0;
      for (; count != 0; --count) {
        const size_t hit = str.find(old, from);
        if (hit == std::string::npos) break;
        out.append(str, from, hit - from);
        out += with;
        from = hit + old.size();
        b.string_of(out.size());
      }
      out.append(str, from, std::string::npos);
      b.string_of(out.size());
      return Value(out);
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return method([name](const std::string& str, CallArgs& a, Budget&) -> Value {
      const std::string sub = need_string(arg(a, 0, nullptr, kNone), name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(code_point_count(str) + 1));
        int64_t n = 0;
        for (size_t at = str.find(sub); at != std::string::npos; at = str.find(sub, at + sub.size())) ++n;
        return Value(n);
      }
      const size_t hit = (name == "find" || name == "index") ? str.find(sub) : str.rfind(sub);
      if (hit == std::string::npos) {
        if (name == "index" || name == "rindex") throw ValueError("substring not found");
        return Value(int64_t{-1});
      }
      return Value(static_cast<int64_t>(code_point_count(std::string_view(str).substr(0, hit))));
    });
  }
  if (name == "join")
    return method([](const std::string& str, CallArgs& a, Budget& b) -> Value {
      std::string out;
      bool first = true;
      for (const Value& item : iterate(arg(a, 0, nullptr, kNone))) {
        if (!item.is_string()) throw ValueError("sequence item: expected str instance, " + item.type_name() + " found");
        if (!first) out += str;
        first = false;
        out += item.str();
        b.string_of(out.size());
      }
      return Value(out);
    });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" || name == "isupper") {
    return method([name](const std::string& str, CallArgs&, Budget&) -> Value {
      if (name == "isdigit") return Value(all_chars(str, [](unsigned char c) { return c >= '0' && c <= '9'; }));
      if (name == "isalpha") return Value(all_chars(str, [](unsigned char c) { return std::isalpha(c) != 0; }));
      if (name == "isalnum") return Value(all_chars(str, [](unsigned char c) { return std::isalnum(c) != 0; }));
      if (name == "isspace") return Value(!str.empty() && py_strip(str, true, true).empty());
      const bool upper = name == "isupper";
      bool cased = false;
      for (char c : str) {
        if (std::isalpha(static_cast<unsigned char>(c))) {
          cased = true;
          if ((std::isupper(static_cast<unsigned char>(c)) != 0) != upper) return Value(false);
        }
      }
      return Value(cased);
    });
  }
  (void)s;
  return missing_attribute(self, name);
}

Value dict_method(const Value& self, const std::string& name) {
  static const Value kNone = Value::none();
  if (name == "items")
    return Value::function("dict.items", [self](CallArgs&) -> Value {
      List out;
      for (const auto& [k, v] : self.dict().entries) out.push_back(Value::list({k, v}));
      return Value::list(std::move(out));
    });
  if (name == "keys")
    return Value::function("dict.keys", [self](CallArgs&) -> Value {
      List out;
      for (const auto& entry : self.dict().entries) out.push_back(entry.first);
      return Value::list(std::move(out));
    });
  if (name == "values")
    return Value::function("dict.values", [self](CallArgs&) -> Value {
      List out;
      for (const auto& entry : self.dict().entries) out.push_back(entry.second);
      return Value::list(std::move(out));
    });
  if (name == "get")
    return Value::function("dict.get", [self](CallArgs& a) -> Value {
      const Value* v = self.dict().find(arg(a, 0, nullptr, kNone));
      return v ? *v : arg(a, 1, "default", kNone);
    });
  return Value::undefined("");
}

Value list_method(const Value& self, const std::string& name) {
  static const Value kNone = Value::none();
  if (name == "index" || name == "count")
    return Value::function("list." + name, [self, name](CallArgs& a) -> Value {
      const Value& x = arg(a, 0, nullptr, kNone);
      int64_t n = 0;
      for (size_t i = 0; i < self.items().size(); ++i)
        if (equal(self.items()[i], x)) {
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
      if (name == "index") throw ValueError(to_repr(x) + " is not in list");
      return Value(n);
    });
  return missing_attribute(self, name);
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name, Budget& budget) {
  if (obj.is_undefined()) throw ValueError(obj.undefined_message());
  if (!name.empty() && name[0] == '_') return Value::undefined("access to attribute '" + name + "' is unsafe");
  switch (obj.kind()) {
    case Value::Kind::Dict: {
      Value method = dict_method(obj, name);
      if (!method.is_undefined()) return method;
      if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      return missing_attribute(obj, name);
    }
    case Value::Kind::Namespace:
      if (const Value* v = obj.ns().attributes.find(std::string_view(name))) return *v;
      return missing_attribute(obj, name);
    case Value::Kind::String: return string_method(obj, name, budget);
    case Value::Kind::List: return list_method(obj, name);
    default: return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key, Budget& budget) {
  if (obj.is_undefined()) throw ValueError(obj.undefined_message());
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (const Value* v = obj.dict().find(key)) return *v;
      if (key.is_string()) return get_attribute(obj, key.str(), budget);
      return Value::undefined("'dict object' has no attribute " + to_repr(key));
    case Value::Kind::Namespace:
      if (key.is_string()) return get_attribute(obj, key.str(), budget);
      return Value::undefined("'Namespace object' has no item " + to_repr(key));
    case Value::Kind::List: case Value::Kind::String: {
      if (key.is_string()) return get_attribute(obj, key.str(), budget);
      if (!key.is_int() && !key.is_bool()) return Value::undefined(object_name(obj) + " has no item " + to_repr(key));
      int64_t i = key.as_int();
      if (obj.is_list()) {
        const auto n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("'list object' has no element " + std::to_string(key.as_int()));
        return obj.items()[static_cast<size_t>(i)];
      }
      const std::vector<size_t> at = code_point_offsets(obj.str());
      const auto n = static_cast<int64_t>(at.size()) - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + std::to_string(key.as_int()));
      return Value(obj.str().substr(at[i], at[i + 1] - at[i]));
    }
    default:
      return Value::undefined(object_name(obj) + " has no item " + to_repr(key));
  }
}

namespace {

// Python's slice.indices(n): the positions a slice visits.
std::vector<int64_t> slice_positions(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw ValueError("slice indices must be integers or None");
    return v.as_int();
  };
  const int64_t step = bound(step_v).value_or(1);
  if (step == 0) throw ValueError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(bound(start_v), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(bound(stop_v), step > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return out;
}

}  // namespace

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Budget& budget) {
  if (obj.is_undefined()) throw ValueError(obj.undefined_message());
  if (obj.is_list()) {
    const List& items = obj.items();
    List out;
    for (int64_t i : slice_positions(static_cast<int64_t>(items.size()), start, stop, step)) out.push_back(items[i]);
    budget.charge(static_cast<int64_t>(out.size()));
    return Value::list(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    const std::vector<size_t> at = code_point_offsets(s);
    const std::vector<int64_t> picks = slice_positions(static_cast<int64_t>(at.size()) - 1, start, stop, step);
    if (!picks.empty() && (step.is_none() || step.is_undefined() || (step.is_int() && step.as_int() == 1)))
      return Value(s.substr(at[picks.front()], at[picks.back() + 1] - at[picks.front()]));
    std::string out;
    for (int64_t i : picks) out.append(s, at[i], at[i + 1] - at[i]);
    budget.string_of(out.size());
    return Value(out);
  }
  return Value::undefined(object_name(obj) + " cannot be sliced");
}

List iterate(const Value& obj) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return obj.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& entry : obj.dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::String: {
      const std::string& s = obj.str();
      const std::vector<size_t> at = code_point_offsets(s);
      List out;
      for (size_t i = 0; i + 1 < at.size(); ++i) out.emplace_back(s.substr(at[i], at[i + 1] - at[i]));
      return out;
    }
    default: throw ValueError("'" + obj.type_name() + "' object is not iterable");
  }
}

}  // namespace stratum::data::jinja
