#pragma once
// The values a chat template computes with: Python's None, bool, int, float,
// str, list and dict as Jinja sees them, plus Undefined (a name or key that
// is not there), namespaces (the one mutable value) and callables. Lists and
// dicts are immutable (transformers renders in an ImmutableSandboxedEnvironment,
// which refuses append/update), so values share them freely. Dicts keep
// insertion order, as Python's do. Plain C++.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace stratum::data::jinja {

class Value;
using List = std::vector<Value>;
struct Dict;
struct Namespace;
struct Function;

// A problem found while computing, without a position yet: the renderer adds
// the template's line and column of the expression it was evaluating.
class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };

  Value() = default;  // Undefined
  // An Undefined that remembers why (its message when used where a value must be).
  static Value undefined(std::string why);
  static Value none();
  Value(bool b);  // NOLINT(google-explicit-constructor): values are built from literals everywhere
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items);
  static Value dict(Dict d);
  static Value ns(std::shared_ptr<Namespace> n);
  static Value function(std::string name, std::function<Value(struct CallArgs&)> call);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *std::static_pointer_cast<const std::string>(p_); }
  const List& items() const { return *std::static_pointer_cast<const List>(p_); }
  const Dict& dict() const { return *std::static_pointer_cast<const Dict>(p_); }
  Namespace& ns() const { return *std::static_pointer_cast<Namespace>(std::const_pointer_cast<void>(p_)); }
  const Function& function() const { return *std::static_pointer_cast<const Function>(p_); }
  // Why an Undefined is undefined ("'x' is undefined").
  std::string undefined_message() const;

  // Python's truth value (Undefined is false).
  bool truthy() const;
  // Python's type name, for messages ("str", "dict", "NoneType").
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const void> p_;  // string, list, dict, namespace, function, or an Undefined's reason
};

struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Replaces the value of a key already there (keeping its place), else appends.
  void set(Value key, Value value);
  size_t size() const { return entries.size(); }

 private:
  std::unordered_map<std::string, size_t> string_keys_;  // index into entries
};

struct Namespace {
  Dict attributes;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword `name`, removed from the list; nullptr when not given.
  const Value* keyword_arg(std::string_view name) const;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

// Python's ==: 1 == 1.0 == True, lists element-wise, dicts as mappings,
// Undefined equal only to Undefined.
bool equal(const Value& a, const Value& b);
// Python's <: numbers, strings (code point order), lists lexicographically;
// throws ValueError for other pairs ("'<' not supported between 'int' and 'str'").
bool less(const Value& a, const Value& b);

// Python's str(): what {{ value }} prints. Undefined prints nothing; lists
// and dicts print as Python's repr.
std::string to_str(const Value& v);
// Python's repr().
std::string to_repr(const Value& v);

// transformers' tojson: json.dumps(x, ensure_ascii, indent, separators,
// sort_keys). indent < 0: none (separators ", " and ": "); indent >= 0: a
// newline and that many spaces per level (separators "," and ": ").
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;
  std::string indent_text;  // used instead of spaces when indent was given as a string
  std::string item_separator, key_separator;  // empty: json.dumps' defaults
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// JSON (insertion order kept) to a Value; numbers stay int or float as parsed.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace stratum::data::jinja
