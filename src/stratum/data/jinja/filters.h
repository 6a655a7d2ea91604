#pragma once
// jinja2's built-in filters and tests as transformers' environment has them
// (its own tojson: json.dumps with ensure_ascii off, indent, separators and
// sort_keys). Plain C++.
#include <string>

#include "stratum/data/jinja/budget.h"
#include "stratum/data/jinja/value.h"

namespace stratum::data::jinja {

// Whether the name is a filter / test this subset has (the parser refuses
// others, as jinja2 refuses an unknown filter when it compiles).
bool is_filter(const std::string& name);
bool is_test(const std::string& name);

// value | name(args); throws ValueError (a bad argument, a type the filter
// does not take, tojson of an undefined value, ...).
Value apply_filter(const std::string& name, const Value& value, CallArgs& args, Budget& budget);
// value is name(args).
bool apply_test(const std::string& name, const Value& value, CallArgs& args, Budget& budget);

}  // namespace stratum::data::jinja
