#pragma once
// Errors of a chat template, each naming where: "<template name> line L,
// column C: ..." for syntax errors and for runtime errors (with the
// expression being evaluated), and the template's own raise_exception
// message. Plain C++.
#include <cstddef>
#include <string>
#include <string_view>

#include "stratum/core/error.h"

namespace stratum::data::jinja {

class TemplateError : public stratum::Error {
 public:
  using stratum::Error::Error;
};

// The template's own raise_exception("..."): what it says is the message.
class TemplateRaised : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// A template's text as the lexer sees it (newlines normalized to \n, one
// trailing newline dropped, as jinja2 does) and the name errors give it.
struct Source {
  std::string name;
  std::string text;
};

// "<name> line L, column C" for a byte offset of source.text (1-based, the
// column in code points).
std::string position(const Source& source, size_t offset);
[[noreturn]] void fail_at(const Source& source, size_t offset, const std::string& message);

}  // namespace stratum::data::jinja
