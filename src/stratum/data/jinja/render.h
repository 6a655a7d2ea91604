#pragma once
// Runs a parsed template with jinja2's semantics as transformers configures
// them: statements, scoping (a loop's iteration and a macro call are scopes
// of their own; namespace() objects carry values out), Python operators, the
// sandbox's attribute rules, the globals raise_exception, strftime_now,
// range, dict and namespace. Plain C++.
#include <string>

#include "stratum/data/jinja/ast.h"
#include "stratum/data/jinja/budget.h"

namespace stratum::data::jinja {

// Renders `t` with `variables` visible to it (messages, add_generation_prompt,
// bos_token, ...). Throws TemplateError naming the template line and column
// of the failing expression (a type error, an undefined value used where a
// value must be, a limit of RenderLimits passed), or TemplateRaised for the
// template's raise_exception("...").
std::string render(const Template& t, const Dict& variables, const RenderLimits& limits = {});

}  // namespace stratum::data::jinja
