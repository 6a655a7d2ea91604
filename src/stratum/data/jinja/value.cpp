#include "stratum/data/jinja/value.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "stratum/data/jinja/text.h"

namespace stratum::data::jinja {
namespace {

// Values nest only as deep as the JSON they came from (capped at parse) or as
// a template builds them; recursion over them stops here instead of at the
// end of the stack.
constexpr int kMaxValueDepth = 256;

void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw ValueError("a value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

}  // namespace

Value Value::undefined(std::string why) {
  Value v;
  v.p_ = std::make_shared<const std::string>(std::move(why));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double f) : kind_(Kind::Float), f_(f) {}
Value::Value(std::string s) : kind_(Kind::String), p_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.p_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.p_ = std::make_shared<const Dict>(std::move(d));
  return v;
}

Value Value::ns(std::shared_ptr<Namespace> n) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.p_ = std::move(n);
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  Value v;
  v.kind_ = Kind::Function;
  v.p_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
  return v;
}

std::string Value::undefined_message() const {
  if (kind_ == Kind::Undefined && p_) return *std::static_pointer_cast<const std::string>(p_);
  return "a value is undefined";
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0;
    case Kind::String: return !str().empty();
    case Kind::List: return !items().empty();
    case Kind::Dict: return dict().size() != 0;
    case Kind::Namespace: case Kind::Function: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
  }
  return "?";
}

const Value* Dict::find(std::string_view key) const {
  const auto it = string_keys_.find(std::string(key));
  return it == string_keys_.end() ? nullptr : &entries[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : entries)
    if (!k.is_string() && equal(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (key.is_string()) {
    const auto [it, added] = string_keys_.emplace(key.str(), entries.size());
    if (!added) {
      entries[it->second].second = std::move(value);
      return;
    }
    entries.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& [k, v] : entries)
    if (!k.is_string() && equal(k, key)) {
      v = std::move(value);
      return;
    }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::keyword_arg(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

namespace {

bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined: case Value::Kind::None: return true;
    case Value::Kind::String: return a.str() == b.str();
    case Value::Kind::List: {
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal_at(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const Dict &x = a.dict(), &y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equal_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace: return &a.ns() == &b.ns();
    case Value::Kind::Function: return &a.function() == &b.function();
    default: return false;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal_at(x[i], y[i], depth + 1)) return less_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  throw ValueError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

void append_repr(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::String: out += py_repr_string(v.str()); return;
    case Value::Kind::List: {
      out += '[';
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, item, depth + 1);
      }
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, item] : v.dict().entries) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, k, depth + 1);
        out += ": ";
        append_repr(out, item, depth + 1);
      }
      out += '}';
      return;
    }
    case Value::Kind::Namespace: {
      out += "<Namespace ";
      append_repr(out, Value::dict(v.ns().attributes), depth + 1);
      out += '>';
      return;
    }
    default: out += to_str(v);
  }
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.str();
    case Value::Kind::Int: return std::to_string(k.as_int());
    case Value::Kind::Float: return json_float_str(k.as_float());
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::None: return "null";
    default: throw ValueError("keys must be str, int, float, bool or None, not " + k.type_name());
  }
}

void append_json(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  check_depth(depth);
  const bool pretty = o.indent >= 0 || !o.indent_text.empty();
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator : pretty ? "," : ", ";
  const std::string key_sep = !o.key_separator.empty() ? o.key_separator : ": ";
  auto newline = [&](int level) {
    if (!pretty) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += o.indent_text.empty() ? std::string(o.indent, ' ') : o.indent_text;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: out += json_float_str(v.as_float()); return;
    case Value::Kind::String: append_json_string(out, v.str(), o.ensure_ascii); return;
    case Value::Kind::List: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += item_sep;
        first = false;
        newline(depth + 1);
        append_json(out, item, o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict().size() == 0) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, item] : v.dict().entries) entries.emplace_back(json_key(k), &item);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      bool first = true;
      for (const auto& [k, item] : entries) {
        if (!first) out += item_sep;
        first = false;
        newline(depth + 1);
        append_json_string(out, k, o.ensure_ascii);
        out += key_sep;
        append_json(out, *item, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw ValueError("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));  // beyond int64: a stated limit (Python keeps the exact int)
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(Value(it.key()), from_json_at(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default: throw ValueError("JSON binary values are not supported");
  }
}

}  // namespace

bool equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_at(a, b, 0); }

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return py_float_str(v.as_float());
    case Value::Kind::String: return v.str();
    case Value::Kind::Function: return "<function " + v.function().name + ">";
    default: {
      std::string out;
      append_repr(out, v, 0);
      return out;
    }
  }
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v, 0);
  return out;
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  append_json(out, v, options, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

}  // namespace stratum::data::jinja
