#pragma once
// Tokens -> the statement tree, following jinja2's grammar and operator
// precedence (conditional < or < and < not < comparisons and `in` < + - <
// ~ < * / // % < ** < unary - + < postfix, filters and tests). Plain C++.
#include <memory>
#include <string>

#include "stratum/data/jinja/ast.h"

namespace stratum::data::jinja {

// Nesting of brackets, expressions and blocks a template may use: deeper is
// an error, not a deep recursion.
inline constexpr int kMaxTemplateNesting = 128;

// Lexes and parses `text` (normalized as jinja2 does). Throws TemplateError
// "<name> line L, column C: ...": a syntax error, an unknown or unsupported
// tag (extends, include, import, call, ...), a block left open, break or
// continue outside a loop, nesting beyond kMaxTemplateNesting.
std::shared_ptr<const Template> parse_template(const std::string& text, const std::string& name);

}  // namespace stratum::data::jinja
