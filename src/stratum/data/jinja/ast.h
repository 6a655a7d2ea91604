#pragma once
// The parsed template: expressions and statements, each with the byte offset
// it starts at (for errors). Plain C++.
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stratum/data/jinja/error.h"
#include "stratum/data/jinja/value.h"

namespace stratum::data::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // literal
    Name,      // name
    List,      // children: items
    Tuple,     // children: items (a list at run time)
    Dict,      // children: key, value, key, value, ...
    GetAttr,   // children[0] . name
    GetItem,   // children[0] [ children[1] ]
    Slice,     // children[0] [ children[1] : children[2] : children[3] ] (each of 1..3 may be null)
    Call,      // children[0] ( children[1..], keywords )
    Filter,    // children[0] | name ( children[1..], keywords )
    Test,      // children[0] is [not] name ( children[1..], keywords )
    Negate,    // - children[0]
    Plus,      // + children[0]
    Not,       // not children[0]
    Binary,    // children[0] name children[1]: + - * / // % ** ~
    And,       // children[0] and children[1]
    Or,        // children[0] or children[1]
    Compare,   // children[0] ops[0] children[1] ops[1] children[2] ...
    Conditional,  // children[0] if children[1] else children[2] (may be null)
  };
  Kind kind = Kind::Literal;
  size_t offset = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;  // Compare: == != < <= > >= in notin
  bool negated = false;          // Test: "is not"
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,        // text
    Print,       // {{ expr }}
    If,          // branches (condition, body); else_body
    For,         // targets in expr [if filter]: body, else_body
    Set,         // targets (or ns_name.attribute) = expr
    SetBlock,    // {% set target %}body{% endset %}, then filters (expr chain on a placeholder)
    Macro,       // name(params with defaults): body
    Break,
    Continue,
    Generation,  // transformers' {% generation %}body{% endgeneration %}: renders its body
    With,        // {% with name = expr, ... %}body{% endwith %}
    FilterBlock, // {% filter name(args) | ... %}body{% endfilter %}
  };
  Kind kind = Kind::Text;
  size_t offset = 0;
  std::string text;
  ExprPtr expr;    // Print, For iterable, Set value, SetBlock/FilterBlock filter chain (operand: Name "")
  ExprPtr filter;  // For: the "if" filter
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;  // For/Set: names (several: unpacking)
  std::string ns_attribute;          // Set/SetBlock: targets[0].ns_attribute = ...
  std::string name;                  // Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro (default may be null), With (value)
};

struct Template {
  Source source;
  Body body;
};

}  // namespace stratum::data::jinja
