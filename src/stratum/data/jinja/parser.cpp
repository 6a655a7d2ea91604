#include "stratum/data/jinja/parser.h"

#include <initializer_list>
#include <vector>

#include "stratum/data/jinja/filters.h"
#include "stratum/data/jinja/lexer.h"

namespace stratum::data::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(const Source& source, std::vector<Token> tokens) : source_(source), tokens_(std::move(tokens)) {}

  Body parse_all() {
    std::string found;
    Body body = parse_body({}, found);
    return body;
  }

 private:
  // --- tokens ----------------------------------------------------------------
  const Token& cur() const { return tokens_[at_]; }
  const Token& look(size_t ahead = 1) const { return tokens_[std::min(at_ + ahead, tokens_.size() - 1)]; }
  void next() {
    if (at_ + 1 < tokens_.size()) ++at_;
  }
  bool is_op(const char* op) const { return cur().type == T::Operator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == T::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(source_, cur().offset, message); }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::End: return "end of template";
      case T::BlockEnd: return "end of statement block";
      case T::VariableEnd: return "end of print statement";
      case T::Data: return "template data";
      case T::String: return "string literal";
      case T::Integer: case T::Float: return "number " + t.text;
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != T::Name) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end(const std::string& tag) {
    if (cur().type != T::BlockEnd) fail("expected the end of the '" + tag + "' statement ('%}'), got " + describe(cur()));
    next();
  }

  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxTemplateNesting)
        p.fail("nested deeper than " + std::to_string(kMaxTemplateNesting) + " levels");
    }
    ~Depth() { --p.depth_; }
  };

  ExprPtr node(Expr::Kind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // --- statements --------------------------------------------------------------
  // Statements up to a block whose tag is one of end_tags (left after its
  // name, which goes to `found`); the whole template when end_tags is empty.
  Body parse_body(std::initializer_list<const char*> end_tags, std::string& found) {
    Depth depth(*this);
    Body body;
    const size_t opened = open_tag_;
    for (;;) {
      const Token& t = cur();
      if (t.type == T::End) {
        if (end_tags.size() == 0) return body;
        std::string wanted;
        for (const char* e : end_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(e) + "'";
        fail_at(source_, opened, "this block is never closed: the template ends before " + wanted);
      }
      if (t.type == T::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->offset = t.offset;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == T::VariableBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Print;
        s->offset = t.offset;
        next();
        s->expr = parse_tuple(true, false);
        if (cur().type != T::VariableEnd) fail("expected the end of the print statement ('}}'), got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.type == T::BlockBegin) {
        if (look().type == T::Name)
          for (const char* e : end_tags)
            if (look().text == e) {
              next();
              found = cur().text;
              next();
              return body;
            }
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    if (cur().type != T::Name) fail("expected a tag name after '{%', got " + describe(cur()));
    const std::string tag = cur().text;
    const size_t offset = cur().offset;
    auto s = std::make_unique<Stmt>();
    s->offset = offset;
    next();
    std::string found;
    const size_t outer_tag = open_tag_;
    open_tag_ = offset;
    struct Restore {
      size_t& at;
      size_t value;
      ~Restore() { at = value; }
    } restore{open_tag_, outer_tag};
    if (tag == "if") {
      s->kind = Stmt::Kind::If;
      ExprPtr condition = parse_tuple(false, false);
      expect_block_end(tag);
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"}, found);
        s->branches.emplace_back(std::move(condition), std::move(b));
        if (found == "elif") {
          condition = parse_tuple(false, false);
          expect_block_end("elif");
          continue;
        }
        if (found == "else") {
          expect_block_end("else");
          s->else_body = parse_body({"endif"}, found);
        }
        expect_block_end("endif");
        break;
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::For;
      s->targets = parse_targets();
      if (!skip_name("in")) fail("expected 'in' in the 'for' statement, got " + describe(cur()));
      s->expr = parse_tuple(false, false, "recursive");
      if (skip_name("if")) s->filter = parse_expression();
      if (is_name("recursive")) fail("recursive loops are not supported");
      expect_block_end(tag);
      ++loops_;
      s->body = parse_body({"endfor", "else"}, found);
      --loops_;
      if (found == "else") {
        expect_block_end("else");
        s->else_body = parse_body({"endfor"}, found);
      }
      expect_block_end("endfor");
    } else if (tag == "set") {
      if (cur().type == T::Name && look().type == T::Operator && look().text == ".") {
        s->targets = {expect_name()};
        next();
        s->ns_attribute = expect_name();
      } else {
        s->targets = parse_targets();
      }
      if (skip_op("=")) {
        s->kind = Stmt::Kind::Set;
        s->expr = parse_tuple(true, false);
        expect_block_end(tag);
      } else {
        s->kind = Stmt::Kind::SetBlock;
        if (s->targets.size() != 1) fail("a block 'set' assigns one name");
        s->expr = parse_filter_chain();
        expect_block_end(tag);
        s->body = parse_body({"endset"}, found);
        expect_block_end("endset");
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::Macro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        std::string param = expect_name();
        ExprPtr def;
        if (skip_op("=")) def = parse_expression();
        s->params.emplace_back(std::move(param), std::move(def));
      }
      next();
      expect_block_end(tag);
      const int saved = loops_;
      loops_ = 0;
      s->body = parse_body({"endmacro"}, found);
      loops_ = saved;
      if (cur().type == T::Name && cur().text == s->name) next();
      expect_block_end("endmacro");
    } else if (tag == "break" || tag == "continue") {
      if (loops_ == 0) fail_at(source_, offset, "'" + tag + "' outside a loop");
      s->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_block_end(tag);
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::Generation;
      expect_block_end(tag);
      s->body = parse_body({"endgeneration"}, found);
      expect_block_end("endgeneration");
    } else if (tag == "with") {
      s->kind = Stmt::Kind::With;
      while (cur().type != T::BlockEnd) {
        if (!s->params.empty()) expect_op(",");
        std::string name = expect_name();
        expect_op("=");
        s->params.emplace_back(std::move(name), parse_expression());
      }
      expect_block_end(tag);
      s->body = parse_body({"endwith"}, found);
      expect_block_end("endwith");
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::FilterBlock;
      s->expr = filter_call(node(Expr::Kind::Name, cur().offset), cur().offset);
      while (is_op("|")) s->expr = parse_filter(std::move(s->expr));
      expect_block_end(tag);
      s->body = parse_body({"endfilter"}, found);
      expect_block_end("endfilter");
    } else if (tag == "elif" || tag == "else" || tag.rfind("end", 0) == 0) {
      fail_at(source_, offset, "unexpected '" + tag + "': no open block it could end");
    } else {
      fail_at(source_, offset, "the '" + tag + "' tag is not supported in chat templates");
    }
    return s;
  }

  // name, or name, name, ... (parentheses allowed) for for/set targets.
  std::vector<std::string> parse_targets() {
    const bool parens = skip_op("(");
    std::vector<std::string> names{expect_name()};
    while (skip_op(",")) {
      if (cur().type != T::Name || is_name("in")) break;
      names.push_back(expect_name());
    }
    if (parens) expect_op(")");
    return names;
  }

  // {% set x | f %}: a chain of filters on a placeholder (Name ""), or null.
  ExprPtr parse_filter_chain() {
    if (!is_op("|")) return nullptr;
    ExprPtr e = node(Expr::Kind::Name, cur().offset);
    while (is_op("|")) e = parse_filter(std::move(e));
    return e;
  }

  // --- expressions -------------------------------------------------------------
  ExprPtr parse_tuple(bool with_conditional, bool explicit_parens, const char* extra_end = nullptr) {
    const size_t offset = cur().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    for (;;) {
      if (!items.empty()) expect_op(",");
      if (cur().type == T::VariableEnd || cur().type == T::BlockEnd || is_op(")") || (extra_end && is_name(extra_end)))
        break;
      items.push_back(with_conditional ? parse_expression() : parse_or());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (items.size() == 1) return std::move(items[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
    }
    auto t = node(Expr::Kind::Tuple, offset);
    t->children = std::move(items);
    return t;
  }

  ExprPtr parse_expression() {
    Depth depth(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const size_t offset = cur().offset;
      next();
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_expression();
      auto c = node(Expr::Kind::Conditional, offset);
      c->children.push_back(std::move(e));
      c->children.push_back(std::move(test));
      c->children.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::Kind kind, ExprPtr left, ExprPtr right, size_t offset, std::string op = {}) {
    auto b = node(kind, offset);
    b->name = std::move(op);
    b->children.push_back(std::move(left));
    b->children.push_back(std::move(right));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const size_t offset = cur().offset;
      next();
      e = binary(Expr::Kind::Or, std::move(e), parse_and(), offset);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const size_t offset = cur().offset;
      next();
      e = binary(Expr::Kind::And, std::move(e), parse_not(), offset);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth depth(*this);
      auto n = node(Expr::Kind::Not, cur().offset);
      next();
      n->children.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    const size_t offset = cur().offset;
    for (;;) {
      if (cur().type == T::Operator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        ops.push_back(cur().text);
        next();
      } else if (is_name("in")) {
        ops.push_back("in");
        next();
      } else if (is_name("not") && look().type == T::Name && look().text == "in") {
        ops.push_back("notin");
        next();
        next();
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto c = node(Expr::Kind::Compare, offset);
    c->children.push_back(std::move(first));
    for (auto& o : operands) c->children.push_back(std::move(o));
    c->ops = std::move(ops);
    return c;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const size_t offset = cur().offset;
      next();
      e = binary(Expr::Kind::Binary, std::move(e), parse_concat(), offset, op);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const size_t offset = cur().offset;
      next();
      e = binary(Expr::Kind::Binary, std::move(e), parse_math2(), offset, "~");
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const size_t offset = cur().offset;
      next();
      e = binary(Expr::Kind::Binary, std::move(e), parse_pow(), offset, op);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const size_t offset = cur().offset;
      next();
      e = binary(Expr::Kind::Binary, std::move(e), parse_unary(true), offset, "**");
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? Expr::Kind::Negate : Expr::Kind::Plus, cur().offset);
      next();
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const size_t offset = t.offset;
    switch (t.type) {
      case T::Name: {
        auto e = node(Expr::Kind::Literal, offset);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::Name;
          e->name = t.text;
        }
        next();
        return e;
      }
      case T::String: {
        std::string s;
        while (cur().type == T::String) {  // adjacent literals join, as in Python
          s += cur().text;
          next();
        }
        auto e = node(Expr::Kind::Literal, offset);
        e->literal = Value(std::move(s));
        return e;
      }
      case T::Integer: case T::Float: {
        auto e = node(Expr::Kind::Literal, offset);
        e->literal = t.type == T::Integer ? Value(t.integer) : Value(t.number);
        next();
        return e;
      }
      case T::Operator:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto e = node(Expr::Kind::List, offset);
          while (!is_op("]")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("]")) break;
            e->children.push_back(parse_expression());
          }
          next();
          return e;
        }
        if (t.text == "{") {
          next();
          auto e = node(Expr::Kind::Dict, offset);
          while (!is_op("}")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("}")) break;
            e->children.push_back(parse_expression());
            expect_op(":");
            e->children.push_back(parse_expression());
          }
          next();
          return e;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr e) {
    const size_t offset = cur().offset;
    if (skip_op(".")) {
      if (cur().type == T::Name) {
        auto g = node(Expr::Kind::GetAttr, offset);
        g->name = cur().text;
        next();
        g->children.push_back(std::move(e));
        return g;
      }
      if (cur().type == T::Integer) {
        auto g = node(Expr::Kind::GetItem, offset);
        auto index = node(Expr::Kind::Literal, cur().offset);
        index->literal = Value(cur().integer);
        next();
        g->children.push_back(std::move(e));
        g->children.push_back(std::move(index));
        return g;
      }
      fail("expected an attribute name after '.', got " + describe(cur()));
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    next();
    if (args.empty()) fail_at(source_, offset, "expected a subscript inside '[]'");
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      for (const auto& a : args)
        if (a->kind == Expr::Kind::Slice) fail_at(source_, a->offset, "a slice among several subscripts is not supported");
      index = node(Expr::Kind::Tuple, offset);
      index->children = std::move(args);
    }
    if (index->kind == Expr::Kind::Slice) {  // the slice's operand is e
      index->children[0] = std::move(e);
      return index;
    }
    auto g = node(Expr::Kind::GetItem, offset);
    g->children.push_back(std::move(e));
    g->children.push_back(std::move(index));
    return g;
  }

  ExprPtr parse_subscribed() {
    const size_t offset = cur().offset;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression();
      if (!is_op(":")) return e;
      parts.push_back(std::move(e));
    }
    next();  // the first ':'
    if (is_op(":") || is_op("]") || is_op(",")) {
      parts.push_back(nullptr);
    } else {
      parts.push_back(parse_expression());
    }
    if (skip_op(":")) {
      if (is_op("]") || is_op(",")) {
        parts.push_back(nullptr);
      } else {
        parts.push_back(parse_expression());
      }
    } else {
      parts.push_back(nullptr);
    }
    auto s = node(Expr::Kind::Slice, offset);
    s->children.push_back(nullptr);  // the operand, set by parse_subscript
    for (auto& p : parts) s->children.push_back(std::move(p));
    return s;
  }

  // ( args ) into e's children (after the callee/operand) and keywords.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == T::Name && look().type == T::Operator && look().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.keywords.empty()) fail("a positional argument after a keyword argument");
        e.children.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = node(Expr::Kind::Call, cur().offset);
    c->children.push_back(std::move(callee));
    parse_call_args(*c);
    return c;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && look().type == T::Name) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr operand) {
    const size_t offset = cur().offset;
    expect_op("|");
    return filter_call(std::move(operand), offset);
  }

  // name[(args)] of a filter applied to operand.
  ExprPtr filter_call(ExprPtr operand, size_t offset) {
    auto f = node(Expr::Kind::Filter, offset);
    const size_t name_at = cur().offset;
    f->name = dotted_name();
    if (!is_filter(f->name)) fail_at(source_, name_at, "no filter named '" + f->name + "'");
    f->children.push_back(std::move(operand));
    if (is_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_test(ExprPtr operand) {
    const size_t offset = cur().offset;
    next();  // 'is'
    auto t = node(Expr::Kind::Test, offset);
    t->negated = skip_name("not");
    const size_t name_at = cur().offset;
    t->name = dotted_name();
    if (!is_test(t->name)) fail_at(source_, name_at, "no test named '" + t->name + "'");
    t->children.push_back(std::move(operand));
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((cur().type == T::Name && !is_name("else") && !is_name("or") && !is_name("and")) ||
               cur().type == T::String || cur().type == T::Integer || cur().type == T::Float || is_op("[") ||
               is_op("{")) {
      if (is_name("is")) fail("tests cannot be chained with 'is'");
      t->children.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  const Source& source_;
  std::vector<Token> tokens_;
  size_t at_ = 0;
  int depth_ = 0;
  int loops_ = 0;
  size_t open_tag_ = 0;  // the tag name of the block being parsed, for "never closed"
};

}  // namespace

std::shared_ptr<const Template> parse_template(const std::string& text, const std::string& name) {
  auto t = std::make_shared<Template>();
  t->source.name = name;
  t->source.text = normalize_template_text(text);
  std::vector<Token> tokens = tokenize(t->source);
  t->body = Parser(t->source, std::move(tokens)).parse_all();
  return t;
}

}  // namespace stratum::data::jinja
