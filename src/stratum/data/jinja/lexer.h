#pragma once
// Template text -> tokens, as jinja2's lexer makes them under transformers'
// settings (trim_blocks, lstrip_blocks): text data, {{ }} and {% %} tags with
// their whitespace control ({%- -%} {{- -}} {%+), comments dropped, {% raw %}
// kept as text. Plain C++.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stratum/data/jinja/error.h"

namespace stratum::data::jinja {

struct Token {
  enum class Type : uint8_t { Data, VariableBegin, VariableEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };
  Type type = Type::End;
  std::string text;  // data, name, operator, or a string literal's decoded value
  int64_t integer = 0;
  double number = 0;
  size_t offset = 0;  // where it starts in source.text
};

// jinja2's view of the source: \r\n and \r become \n, one trailing newline
// is dropped (keep_trailing_newline is off).
std::string normalize_template_text(const std::string& text);

// Throws TemplateError naming the line and column: an unterminated tag,
// comment, string or raw block, a character no token starts with,
// unbalanced brackets.
std::vector<Token> tokenize(const Source& source);

}  // namespace stratum::data::jinja
