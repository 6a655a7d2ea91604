#include "stratum/data/jinja/render.h"

#include <cmath>
#include <ctime>
#include <unordered_map>

#include "stratum/data/jinja/access.h"
#include "stratum/data/jinja/filters.h"
#include "stratum/data/jinja/text.h"

namespace stratum::data::jinja {
namespace {

// The template's raise_exception("..."): passes through the ValueError
// handlers as itself, to become a TemplateRaised at its call.
class RaiseCalled : public ValueError {
 public:
  using ValueError::ValueError;
};

// Statements and expressions in progress at once, macro calls included: an
// adversarial template cannot run the stack out.
constexpr int kMaxEvalDepth = 768;

struct Frame {
  std::unordered_map<std::string, Value> vars;
  const Frame* parent = nullptr;
};

enum class Flow { Normal, Break, Continue };

Value undefined_name(const std::string& name) { return Value::undefined("'" + name + "' is undefined"); }

void need_defined(const Value& v) {
  if (v.is_undefined()) throw ValueError(v.undefined_message());
}

std::string operand_types(const char* op, const Value& a, const Value& b) {
  return std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'";
}

[[noreturn]] void overflow() { throw ValueError("integer overflow: the result needs more than 64 bits"); }

int64_t add_checked(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw ValueError("integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) throw ValueError("integer overflow: the result needs more than 64 bits");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw ValueError("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(const Value& seq, int64_t times, Budget& budget) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const size_t size = seq.str().size();
    if (size != 0 && static_cast<uint64_t>(times) > budget.limits().max_output_bytes / size + 1)
      budget.string_of(budget.limits().max_output_bytes + 1);
    budget.string_of(size * static_cast<size_t>(times));
    std::string out;
    out.reserve(size * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(std::move(out));
  }
  const size_t size = seq.items().size();
  if (size != 0 && static_cast<uint64_t>(times) > static_cast<uint64_t>(budget.limits().max_sequence) / size + 1)
    budget.sequence_of(budget.limits().max_sequence + 1);
  budget.sequence_of(static_cast<int64_t>(size) * times);
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, Budget& budget) {
  if (op == "~") {
    std::string out = to_str(a);
    const std::string right = to_str(b);
    budget.string_of(out.size() + right.size());
    return Value(out + right);
  }
  need_defined(a);
  need_defined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers && !floats) return Value(add_checked(a.as_int(), b.as_int()));
    if (numbers) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      budget.string_of(a.str().size() + b.str().size());
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      budget.sequence_of(static_cast<int64_t>(a.items().size() + b.items().size()));
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out));
    }
    if (a.is_string() || b.is_string())
      throw ValueError("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() + "\") to str");
    throw ValueError(operand_types("+", a, b));
  }
  if (op == "*") {
    if (numbers && !floats) return Value(mul_checked(a.as_int(), b.as_int()));
    if (numbers) return Value(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), budget);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), budget);
    throw ValueError(operand_types("*", a, b));
  }
  if (!numbers) {
    if (op == "%" && a.is_string()) throw ValueError("printf-style formatting ('%' on a string) is not supported");
    throw ValueError(operand_types(op.c_str(), a, b));
  }
  if (op == "-") {
    if (!floats) return Value(sub_checked(a.as_int(), b.as_int()));
    return Value(a.as_float() - b.as_float());
  }
  if (op == "/") {
    if (b.as_float() == 0) throw ValueError("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!floats) return Value(floor_div(a.as_int(), b.as_int()));
    if (b.as_float() == 0) throw ValueError("float floor division by zero");
    return Value(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (!floats) return Value(py_mod(a.as_int(), b.as_int()));
    if (b.as_float() == 0) throw ValueError("float modulo");
    double r = std::fmod(a.as_float(), b.as_float());
    if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
    return Value(r);
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if (e & 1) result = mul_checked(result, base);
        if (e > 1) base = mul_checked(base, base);
      }
      return Value(result);
    }
    if (a.as_float() == 0 && b.as_float() < 0) throw ValueError("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  throw ValueError("unknown operator " + op);
}

class Renderer {
 public:
  Renderer(const Template& t, const Dict& variables, const RenderLimits& limits) : t_(t), budget_(limits) {
    add_globals();
    for (const auto& [k, v] : variables.entries)
      if (k.is_string()) globals_.vars[k.str()] = v;
    root_.parent = &globals_;
  }

  // A template can store a namespace in itself, or two in each other
  // ({% set ns.self = ns %}): their attributes are dropped here, so that no
  // reference cycle outlives the render.
  ~Renderer() {
    for (const auto& ns : namespaces_) ns->attributes = Dict{};
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string run() {
    std::string out;
    exec_body(t_.body, root_, out);
    return out;
  }

 private:
  struct Depth {
    Renderer& r;
    Depth(Renderer& renderer, size_t offset) : r(renderer) {
      if (++r.depth_ > kMaxEvalDepth)
        fail_at(r.t_.source, offset, "the template nests deeper than " + std::to_string(kMaxEvalDepth) +
                                         " statements, expressions and macro calls at once");
    }
    ~Depth() { --r.depth_; }
  };

  // --- statements --------------------------------------------------------------
  Flow exec_body(const Body& body, Frame& f, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow flow = exec(*s, f, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  void emit(std::string& out, const std::string& text) {
    out += text;
    if (out.size() > budget_.limits().max_output_bytes)
      throw ValueError("the render is longer than the limit of " + std::to_string(budget_.limits().max_output_bytes) + " bytes");
    budget_.charge(static_cast<int64_t>(text.size() / 64));
  }

  Flow exec(const Stmt& s, Frame& f, std::string& out) {
    Depth depth(*this, s.offset);
    try {
      budget_.charge(1);
      switch (s.kind) {
        case Stmt::Kind::Text: emit(out, s.text); return Flow::Normal;
        case Stmt::Kind::Print: emit(out, to_str(eval(*s.expr, f))); return Flow::Normal;
        case Stmt::Kind::If:
          for (const auto& [condition, body] : s.branches)
            if (eval(*condition, f).truthy()) return exec_body(body, f, out);
          return exec_body(s.else_body, f, out);
        case Stmt::Kind::For: return exec_for(s, f, out);
        case Stmt::Kind::Set: assign(s, f, eval(*s.expr, f)); return Flow::Normal;
        case Stmt::Kind::SetBlock: {
          std::string captured;
          exec_body(s.body, f, captured);
          assign(s, f, s.expr ? apply_chain(*s.expr, f, Value(captured)) : Value(captured));
          return Flow::Normal;
        }
        case Stmt::Kind::FilterBlock: {
          std::string captured;
          exec_body(s.body, f, captured);
          emit(out, to_str(apply_chain(*s.expr, f, Value(captured))));
          return Flow::Normal;
        }
        case Stmt::Kind::Macro: f.vars[s.name] = make_macro(s); return Flow::Normal;
        case Stmt::Kind::Break: return Flow::Break;
        case Stmt::Kind::Continue: return Flow::Continue;
        case Stmt::Kind::Generation: return exec_body(s.body, f, out);
        case Stmt::Kind::With: {
          Frame inner;
          inner.parent = &f;
          for (const auto& [name, value] : s.params) inner.vars[name] = eval(*value, f);
          return exec_body(s.body, inner, out);
        }
      }
    } catch (const RaiseCalled&) {
      throw;
    } catch (const ValueError& e) {
      fail_at(t_.source, s.offset, e.what());
    }
    return Flow::Normal;
  }

  // A filter chain parsed on a placeholder (the Name ""), run on `value`.
  Value apply_chain(const Expr& chain, Frame& f, Value value) {
    Frame inner;
    inner.parent = &f;
    inner.vars[""] = std::move(value);
    return eval(chain, inner);
  }

  static void unpack(const std::vector<std::string>& targets, const Value& item, Frame& into) {
    if (targets.size() == 1) {
      into.vars[targets[0]] = item;
      return;
    }
    const List parts = item.is_list() || item.is_string() ? iterate(item) : List{};
    if (!item.is_list() && !item.is_string()) throw ValueError("cannot unpack a non-sequence " + item.type_name());
    if (parts.size() != targets.size())
      throw ValueError(parts.size() > targets.size() ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                                                     : "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                                           ", got " + std::to_string(parts.size()) + ")");
    for (size_t i = 0; i < parts.size(); ++i) into.vars[targets[i]] = parts[i];
  }

  void assign(const Stmt& s, Frame& f, Value value) {
    if (!s.ns_attribute.empty()) {
      const Value target = lookup(f, s.targets[0]);
      if (!target.is_namespace()) throw ValueError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
      if (s.ns_attribute[0] == '_')
        throw ValueError("chat templates cannot store underscore-prefixed attributes on a namespace ('" + s.ns_attribute + "')");
      target.ns().attributes.set(Value(s.ns_attribute), std::move(value));
      return;
    }
    unpack(s.targets, value, f);
  }

  Flow exec_for(const Stmt& s, Frame& f, std::string& out) {
    List items = iterate(eval(*s.expr, f));
    if (s.filter) {
      List kept;
      for (Value& item : items) {
        budget_.charge(1);
        Frame probe;
        probe.parent = &f;
        unpack(s.targets, item, probe);
        if (eval(*s.filter, probe).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, f, out);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      budget_.charge(1);
      Frame iteration;
      iteration.parent = &f;
      unpack(s.targets, items[i], iteration);
      iteration.vars["loop"] = loop_object(items, i);
      const Flow flow = exec_body(s.body, iteration, out);
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  static Value loop_object(const List& items, int64_t i) {
    const auto n = static_cast<int64_t>(items.size());
    Dict d;
    d.set(Value("index"), Value(i + 1));
    d.set(Value("index0"), Value(i));
    d.set(Value("revindex"), Value(n - i));
    d.set(Value("revindex0"), Value(n - i - 1));
    d.set(Value("first"), Value(i == 0));
    d.set(Value("last"), Value(i == n - 1));
    d.set(Value("length"), Value(n));
    d.set(Value("depth"), Value(int64_t{1}));
    d.set(Value("depth0"), Value(int64_t{0}));
    d.set(Value("previtem"), i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    d.set(Value("nextitem"), i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    d.set(Value("cycle"), Value::function("loop.cycle", [i](CallArgs& a) -> Value {
            if (a.positional.empty()) throw ValueError("no items for cycling given");
            return a.positional[static_cast<size_t>(i) % a.positional.size()];
          }));
    return Value::dict(std::move(d));
  }

  Value make_macro(const Stmt& s) {
    const Stmt* macro = &s;
    return Value::function(s.name, [this, macro](CallArgs& a) -> Value {
      if (++calls_ > budget_.limits().max_call_depth) {
        --calls_;
        throw ValueError("macro calls nest deeper than " + std::to_string(budget_.limits().max_call_depth));
      }
      struct Leave {
        int& calls;
        ~Leave() { --calls; }
      } leave{calls_};
      if (a.positional.size() > macro->params.size())
        throw ValueError("macro '" + macro->name + "' takes not more than " + std::to_string(macro->params.size()) + " argument(s)");
      Frame frame;
      frame.parent = &root_;  // macros see the template's top level (a stated simplification of jinja2's closures)
      for (size_t i = 0; i < macro->params.size(); ++i) {
        const auto& [name, def] = macro->params[i];
        if (i < a.positional.size()) {
          frame.vars[name] = a.positional[i];
        } else if (const Value* k = a.keyword_arg(name)) {
          frame.vars[name] = *k;
        } else {
          frame.vars[name] = def ? eval(*def, frame) : Value::undefined("parameter '" + name + "' was not provided");
        }
      }
      for (const auto& [k, v] : a.keyword) {
        bool known = false;
        for (const auto& p : macro->params) known = known || p.first == k;
        if (!known) throw ValueError("macro '" + macro->name + "' takes no keyword argument '" + k + "'");
      }
      std::string out;
      exec_body(macro->body, frame, out);
      return Value(std::move(out));
    });
  }

  // --- expressions -------------------------------------------------------------
  Value lookup(const Frame& f, const std::string& name) const {
    for (const Frame* at = &f; at; at = at->parent) {
      const auto it = at->vars.find(name);
      if (it != at->vars.end()) return it->second;
    }
    return undefined_name(name);
  }

  Value eval(const Expr& e, Frame& f) {
    Depth depth(*this, e.offset);
    try {
      budget_.charge(1);
      return eval_here(e, f);
    } catch (const RaiseCalled& r) {
      throw TemplateRaised(position(t_.source, e.offset) + ": " + r.what());
    } catch (const ValueError& err) {
      fail_at(t_.source, e.offset, err.what());
    }
  }

  CallArgs eval_args(const Expr& e, Frame& f, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.children.size(); ++i) a.positional.push_back(eval(*e.children[i], f));
    for (const auto& [k, v] : e.keywords) a.keyword.emplace_back(k, eval(*v, f));
    return a;
  }

  Value eval_here(const Expr& e, Frame& f) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.literal;
      case Expr::Kind::Name: return lookup(f, e.name);
      case Expr::Kind::List: case Expr::Kind::Tuple: {
        List items;
        for (const auto& c : e.children) items.push_back(eval(*c, f));
        return Value::list(std::move(items));
      }
      case Expr::Kind::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value key = eval(*e.children[i], f);
          if (key.is_list() || key.is_dict() || key.is_undefined()) throw ValueError("unhashable type: '" + key.type_name() + "'");
          d.set(std::move(key), eval(*e.children[i + 1], f));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::GetAttr: return get_attribute(eval(*e.children[0], f), e.name, budget_);
      case Expr::Kind::GetItem: return get_item(eval(*e.children[0], f), eval(*e.children[1], f), budget_);
      case Expr::Kind::Slice: {
        const Value obj = eval(*e.children[0], f);
        auto part = [&](size_t i) { return e.children[i] ? eval(*e.children[i], f) : Value::none(); };
        return get_slice(obj, part(1), part(2), part(3), budget_);
      }
      case Expr::Kind::Call: {
        const Value callee = eval(*e.children[0], f);
        CallArgs a = eval_args(e, f, 1);
        if (callee.is_function()) return callee.function().call(a);
        need_defined(callee);
        throw ValueError("'" + callee.type_name() + "' object is not callable");
      }
      case Expr::Kind::Filter: {
        const Value operand = eval(*e.children[0], f);
        CallArgs a = eval_args(e, f, 1);
        return apply_filter(e.name, operand, a, budget_);
      }
      case Expr::Kind::Test: {
        const Value operand = eval(*e.children[0], f);
        CallArgs a = eval_args(e, f, 1);
        return Value(apply_test(e.name, operand, a, budget_) != e.negated);
      }
      case Expr::Kind::Negate: case Expr::Kind::Plus: {
        const Value v = eval(*e.children[0], f);
        need_defined(v);
        if (!v.is_number()) throw ValueError("bad operand type for unary " + std::string(e.kind == Expr::Kind::Negate ? "-" : "+") + ": '" + v.type_name() + "'");
        if (e.kind == Expr::Kind::Plus) return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_float());
        if (v.as_int() == INT64_MIN) overflow();
        return Value(-v.as_int());
      }
      case Expr::Kind::Not: return Value(!eval(*e.children[0], f).truthy());
      case Expr::Kind::And: {
        Value left = eval(*e.children[0], f);
        return left.truthy() ? eval(*e.children[1], f) : left;
      }
      case Expr::Kind::Or: {
        Value left = eval(*e.children[0], f);
        return left.truthy() ? left : eval(*e.children[1], f);
      }
      case Expr::Kind::Binary:
        return arithmetic(e.name, eval(*e.children[0], f), eval(*e.children[1], f), budget_);
      case Expr::Kind::Compare: {
        Value left = eval(*e.children[0], f);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1], f);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::Conditional:
        if (eval(*e.children[1], f).truthy()) return eval(*e.children[0], f);
        if (e.children[2]) return eval(*e.children[2], f);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    return Value();
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in" || op == "notin") {
      CallArgs args;
      args.positional.push_back(b);
      return apply_test("in", a, args, budget_) == (op == "in");
    }
    if (a.is_undefined() || b.is_undefined()) need_defined(a.is_undefined() ? a : b);
    if (op == "<") return less(a, b);
    if (op == ">") return less(b, a);
    if (op == "<=") return less(a, b) || equal(a, b);
    return less(b, a) || equal(a, b);
  }

  // --- globals -----------------------------------------------------------------
  void add_globals() {
    Budget* budget = &budget_;
    globals_.vars["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
      throw RaiseCalled(a.positional.empty() ? std::string() : to_str(a.positional[0]));
    });
    globals_.vars["strftime_now"] = Value::function("strftime_now", [](CallArgs& a) -> Value {
      if (a.positional.empty() || !a.positional[0].is_string()) throw ValueError("strftime_now takes a format string");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      const std::string& format = a.positional[0].str();
      if (format.empty()) return Value(std::string());
      for (size_t size = 256; size <= 65536; size *= 4) {
        std::string buf(size, '\0');
        const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
        if (n > 0) return Value(buf.substr(0, n));
      }
      return Value(std::string());
    });
    globals_.vars["range"] = Value::function("range", [budget](CallArgs& a) -> Value {
      std::vector<int64_t> n;
      for (const Value& v : a.positional) {
        if (!v.is_int() && !v.is_bool()) throw ValueError("range() takes integers, not " + v.type_name());
        n.push_back(v.as_int());
      }
      if (n.empty() || n.size() > 3) throw ValueError("range expected 1 to 3 arguments");
      const int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1], step = n.size() == 3 ? n[2] : 1;
      if (step == 0) throw ValueError("range() arg 3 must not be zero");
      const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
      budget->sequence_of(count > 0 ? static_cast<int64_t>(std::min(count, 9e18)) : 0);
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
      return Value::list(std::move(out));
    });
    globals_.vars["dict"] = Value::function("dict", [](CallArgs& a) -> Value {
      Dict d;
      if (!a.positional.empty()) {
        const Value& from = a.positional[0];
        if (from.is_dict()) {
          d = from.dict();
        } else {
          for (const Value& pair : iterate(from)) {
            if (!pair.is_list() || pair.items().size() != 2) throw ValueError("dict() takes a mapping or key, value pairs");
            d.set(pair.items()[0], pair.items()[1]);
          }
        }
      }
      for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
      return Value::dict(std::move(d));
    });
    globals_.vars["namespace"] = Value::function("namespace", [this](CallArgs& a) -> Value {
      auto ns = std::make_shared<Namespace>();
      namespaces_.push_back(ns);
      auto put = [&](const Value& k, const Value& v) {
        if (k.is_string() && !k.str().empty() && k.str()[0] == '_')
          throw ValueError("chat templates cannot store underscore-prefixed attributes on a namespace ('" + k.str() + "')");
        ns->attributes.set(k, v);
      };
      if (!a.positional.empty()) {
        if (!a.positional[0].is_dict()) throw ValueError("namespace() takes a mapping or keyword arguments");
        for (const auto& [k, v] : a.positional[0].dict().entries) put(k, v);
      }
      for (const auto& [k, v] : a.keyword) put(Value(k), v);
      return Value::ns(std::move(ns));
    });
  }

  const Template& t_;
  Budget budget_;
  Frame globals_, root_;
  int depth_ = 0;
  int calls_ = 0;
  std::vector<std::shared_ptr<Namespace>> namespaces_;  // every one this render made
};

}  // namespace

std::string render(const Template& t, const Dict& variables, const RenderLimits& limits) {
  return Renderer(t, variables, limits).run();
}

}  // namespace stratum::data::jinja
