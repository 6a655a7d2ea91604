#include "stratum/data/jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_set>

#include "stratum/data/jinja/access.h"
#include "stratum/data/jinja/text.h"

namespace stratum::data::jinja {
namespace {

const std::unordered_set<std::string>& filter_names() {
  static const std::unordered_set<std::string> names = {
      "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent",
      "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
      "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
      "trim", "unique", "upper", "wordcount"};
  return names;
}

const std::unordered_set<std::string>& test_names() {
  static const std::unordered_set<std::string> names = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false", "filter",
      "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=", "lower", "lt",
      "lessthan", "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string", "test",
      "true", "undefined", "upper"};
  return names;
}

const Value kNone = Value::none();

// Argument i, or the keyword, or the fallback.
// By value: a fallback is often a temporary, which a returned reference would outlive.
Value arg(CallArgs& a, size_t i, const char* keyword, const Value& fallback) {
  if (i < a.positional.size()) return a.positional[i];
  if (keyword)
    if (const Value* k = a.keyword_arg(keyword)) return *k;
  return fallback;
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(code_point_count(v.str()));
    case Value::Kind::List: return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.dict().size());
    default: throw ValueError("object of type '" + v.type_name() + "' has no len()");
  }
}

// The attribute path "a.b.0" of jinja2's attribute= arguments.
Value attribute_path(const Value& item, const Value& path, Budget& budget) {
  if (path.is_int()) return get_item(item, path, budget);
  const std::string p = to_str(path);
  Value v = item;
  size_t from = 0;
  for (;;) {
    const size_t dot = p.find('.', from);
    const std::string part = p.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10))), budget)
               : get_item(v, Value(part), budget);
    if (dot == std::string::npos) return v;
    if (v.is_undefined()) return v;
    from = dot + 1;
  }
}

// Sort and comparison keys of jinja2's case-insensitive filters: strings lowered.
Value fold_case(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value(ascii_lower(v.str())) : v;
}

// Python's round(x, n) for the 'common' method: half to even on the scaled value.
double py_round(double x, int64_t digits) {
  const double scale = std::pow(10.0, static_cast<double>(digits));
  const double y = x * scale;
  double r = std::nearbyint(y);  // the default rounding mode is to nearest, ties to even
  return r / scale;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value to_int(const Value& v, const Value& fallback, int base) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, base);
      if (errno == 0 && end && *end == '\0') return Value(static_cast<int64_t>(i));
      const double d = std::strtod(s.c_str(), &end);
      if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    const std::string s = py_strip(v.str(), true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value(d);
  }
  return fallback;
}

// The remaining arguments of select/reject(test, args...) after `skip` of them.
CallArgs rest_args(const CallArgs& a, size_t skip) {
  CallArgs out;
  for (size_t i = skip; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  return out;
}

List select(const Value& seq, CallArgs& a, bool keep_if, bool by_attribute, Budget& budget) {
  List out;
  const size_t test_at = by_attribute ? 1 : 0;
  const Value& attribute = by_attribute ? arg(a, 0, nullptr, kNone) : kNone;
  const bool has_test = a.positional.size() > test_at;
  const std::string test = has_test ? to_str(a.positional[test_at]) : "";
  if (has_test && !is_test(test)) throw ValueError("no test named '" + test + "'");
  for (const Value& item : iterate(seq)) {
    budget.charge(1);
    const Value subject = by_attribute ? attribute_path(item, attribute, budget) : item;
    bool ok;
    if (has_test) {
      CallArgs targs = rest_args(a, test_at + 1);
      ok = apply_test(test, subject, targs, budget);
    } else {
      ok = subject.truthy();
    }
    if (ok == keep_if) out.push_back(item);
  }
  return out;
}

std::string indent(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string pad = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  List lines;
  {
    CallArgs none;
    Budget unlimited{RenderLimits{}};
    Value split = get_attribute(Value(s + "\n"), "splitlines", unlimited);
    lines = split.function().call(none).items();
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].str();
    if (i == 0) {
      out = line;
      continue;
    }
    out += "\n";
    if (blank || !line.empty()) out += pad;
    out += line;
  }
  if (first) out = pad + out;
  return out;
}

}  // namespace

bool is_filter(const std::string& name) { return filter_names().count(name) != 0; }
bool is_test(const std::string& name) { return test_names().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& v, CallArgs& a, Budget& budget) {
  budget.charge(1);
  if (name == "tojson") {  // transformers' signature: tojson(x, ensure_ascii, indent, separators, sort_keys)
    JsonOptions o;
    o.ensure_ascii = arg(a, 0, "ensure_ascii", Value(false)).truthy();
    const Value& indent_v = arg(a, 1, "indent", kNone);
    if (indent_v.is_int()) o.indent = static_cast<int>(std::clamp<int64_t>(indent_v.as_int(), 0, 64));
    else if (indent_v.is_string()) o.indent_text = indent_v.str(), o.indent = 0;
    else if (!indent_v.is_none()) throw ValueError("tojson's indent must be an int, a str or None");
    const Value& seps = arg(a, 2, "separators", kNone);
    if (seps.is_list() && seps.items().size() == 2 && seps.items()[0].is_string() && seps.items()[1].is_string()) {
      o.item_separator = seps.items()[0].str();
      o.key_separator = seps.items()[1].str();
    } else if (!seps.is_none()) {
      throw ValueError("tojson's separators must be a pair of strings");
    }
    o.sort_keys = arg(a, 3, "sort_keys", Value(false)).truthy();
    std::string out = to_json(v, o);
    budget.string_of(out.size());
    return Value(std::move(out));
  }
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "trim") {
    const Value& chars = arg(a, 0, "chars", kNone);
    const std::string s = to_str(v);
    return chars.is_none() ? Value(py_strip(s, true, true)) : Value(py_strip_chars(s, to_str(chars), true, true));
  }
  if (name == "upper") return Value(ascii_upper(to_str(v)));
  if (name == "lower") return Value(ascii_lower(to_str(v)));
  if (name == "title") return Value(py_title(to_str(v)));
  if (name == "capitalize") return Value(py_capitalize(to_str(v)));
  if (name == "string") return v.is_string() ? v : Value(to_str(v));
  if (name == "safe") return v;
  if (name == "e" || name == "escape") return Value(escape_html(to_str(v)));
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", Value(std::string()));
    return v;
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw ValueError("can only get item pairs from a mapping, not " + v.type_name());
    List out;
    for (const auto& [k, x] : v.dict().entries) out.push_back(Value::list({k, x}));
    return Value::list(std::move(out));
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "first" || name == "last") {
    const List items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      const std::vector<size_t> at = code_point_offsets(v.str());
      std::string out;
      for (size_t i = at.size() - 1; i > 0; --i) out.append(v.str(), at[i - 1], at[i] - at[i - 1]);
      return Value(out);
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "join") {
    const std::string sep = to_str(arg(a, 0, "d", Value(std::string())));
    const Value& attribute = arg(a, 1, "attribute", kNone);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attribute.is_none() ? item : attribute_path(item, attribute, budget));
      budget.string_of(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    CallArgs margs;
    margs.positional = {arg(a, 0, "old", kNone), arg(a, 1, "new", kNone)};
    const Value& count = arg(a, 2, "count", kNone);
    if (!count.is_none()) margs.positional.push_back(count);
    return get_attribute(Value(to_str(v)), "replace", budget).function().call(margs);
  }
  if (name == "int") return to_int(v, arg(a, 0, "default", Value(int64_t{0})), static_cast<int>(arg(a, 1, "base", Value(int64_t{10})).as_int()));
  if (name == "float") return to_float(v, arg(a, 0, "default", Value(0.0)));
  if (name == "abs") {
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    throw ValueError("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") {
    const int64_t precision = arg(a, 0, "precision", Value(int64_t{0})).as_int();
    const std::string method = to_str(arg(a, 1, "method", Value("common")));
    if (!v.is_number()) throw ValueError("round takes a number, not " + v.type_name());
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (method == "ceil") return Value(std::ceil(v.as_float() * scale) / scale);
    if (method == "floor") return Value(std::floor(v.as_float() * scale) / scale);
    if (method != "common") throw ValueError("method must be common, ceil or floor");
    return Value(py_round(v.as_float(), precision));
  }
  if (name == "attr") return get_attribute(v, to_str(arg(a, 0, "name", kNone)), budget);
  if (name == "map") {
    List out;
    const Value* attribute = a.keyword_arg("attribute");
    for (const Value& item : iterate(v)) {
      budget.charge(1);
      if (attribute) {
        Value x = attribute_path(item, *attribute, budget);
        if (x.is_undefined())
          if (const Value* d = a.keyword_arg("default")) x = *d;
        out.push_back(x);
      } else {
        if (a.positional.empty()) throw ValueError("map needs a filter name or attribute=");
        const std::string filter = to_str(a.positional[0]);
        if (!is_filter(filter)) throw ValueError("no filter named '" + filter + "'");
        CallArgs fargs = rest_args(a, 1);
        fargs.keyword = a.keyword;
        out.push_back(apply_filter(filter, item, fargs, budget));
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") return Value::list(select(v, a, name == "select", false, budget));
  if (name == "selectattr" || name == "rejectattr") return Value::list(select(v, a, name == "selectattr", true, budget));
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const bool reverse = name == "sort" && arg(a, 0, "reverse", Value(false)).truthy();
    const bool case_sensitive = arg(a, name == "sort" ? 1 : 0, "case_sensitive", Value(false)).truthy();
    const Value& attribute = arg(a, name == "sort" ? 2 : 1, "attribute", kNone);
    List items = iterate(v);
    budget.charge(static_cast<int64_t>(items.size()) * 8);
    auto key = [&](const Value& item) {
      return fold_case(attribute.is_none() ? item : attribute_path(item, attribute, budget), case_sensitive);
    };
    if (name == "unique") {
      List out, seen;
      for (const Value& item : items) {
        const Value k = key(item);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    }
    if (name == "min" || name == "max") {
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      size_t best = 0;
      for (size_t i = 1; i < items.size(); ++i)
        if (name == "min" ? less(key(items[i]), key(items[best])) : less(key(items[best]), key(items[i]))) best = i;
      return items[best];
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return reverse ? less(key(y), key(x)) : less(key(x), key(y));
    });
    return Value::list(std::move(items));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw ValueError("dictsort takes a mapping, not " + v.type_name());
    const bool case_sensitive = arg(a, 0, "case_sensitive", Value(false)).truthy();
    const std::string by = to_str(arg(a, 1, "by", Value("key")));
    const bool reverse = arg(a, 2, "reverse", Value(false)).truthy();
    std::vector<std::pair<Value, Value>> entries = v.dict().entries;
    const size_t at = by == "value" ? 1 : 0;
    std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
      const Value kx = fold_case(at ? x.second : x.first, case_sensitive), ky = fold_case(at ? y.second : y.first, case_sensitive);
      return reverse ? less(ky, kx) : less(kx, ky);
    });
    List out;
    for (auto& [k, x] : entries) out.push_back(Value::list({k, x}));
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    const Value& attribute = arg(a, 0, "attribute", kNone);
    Value total = arg(a, 1, "start", Value(int64_t{0}));
    for (const Value& item : iterate(v)) {
      const Value x = attribute.is_none() ? item : attribute_path(item, attribute, budget);
      if (!x.is_number() || !total.is_number()) throw ValueError("sum takes numbers");
      total = (x.is_float() || total.is_float()) ? Value(total.as_float() + x.as_float()) : Value(total.as_int() + x.as_int());
    }
    return total;
  }
  if (name == "indent") {
    const std::string out = indent(to_str(v), arg(a, 0, "width", Value(int64_t{4})), arg(a, 1, "first", Value(false)).truthy(),
                                   arg(a, 2, "blank", Value(false)).truthy());
    budget.string_of(out.size());
    return Value(out);
  }
  if (name == "wordcount") {
    CallArgs none;
    return Value(static_cast<int64_t>(get_attribute(Value(to_str(v)), "split", budget).function().call(none).items().size()));
  }
  throw ValueError("no filter named '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a, Budget& budget) {
  budget.charge(1);
  const Value& other = arg(a, 0, nullptr, kNone);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    CallArgs none;
    return get_attribute(v, name == "lower" ? "islower" : "isupper", budget).function().call(none).truthy();
  }
  if (name == "odd" || name == "even") {
    if (!v.is_int() && !v.is_bool()) throw ValueError("'" + name + "' tests an int, not " + v.type_name());
    const bool odd = (v.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    if (!v.is_number() || !other.is_number() || other.as_float() == 0) throw ValueError("divisibleby takes non-zero numbers");
    if (v.is_float() || other.is_float()) return std::fmod(v.as_float(), other.as_float()) == 0;
    return v.as_int() % other.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other);
  if (name == "ne" || name == "!=") return !equal(v, other);
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return less(other, v);
  if (name == "le" || name == "<=") return !less(other, v);
  if (name == "ge" || name == ">=") return !less(v, other);
  if (name == "in") {
    if (other.is_string()) {
      if (!v.is_string()) throw ValueError("'in <string>' requires string as left operand, not " + v.type_name());
      return other.str().find(v.str()) != std::string::npos;
    }
    if (other.is_dict()) return other.dict().find(v) != nullptr;
    for (const Value& item : iterate(other))
      if (equal(item, v)) return true;
    return false;
  }
  if (name == "sameas") {
    if (v.kind() != other.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == other.as_bool();
    if (v.is_int()) return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's cached ints
    if (v.is_string()) return &v.str() == &other.str();
    if (v.is_list()) return &v.items() == &other.items();
    if (v.is_dict()) return &v.dict() == &other.dict();
    if (v.is_namespace()) return &v.ns() == &other.ns();
    return false;
  }
  if (name == "filter") return v.is_string() && is_filter(v.str());
  if (name == "test") return v.is_string() && is_test(v.str());
  throw ValueError("no test named '" + name + "'");
}

}  // namespace stratum::data::jinja
