#pragma once
// Reading values as jinja2's sandbox does: attribute and item lookup (an
// attribute of a dict is its key unless it names a dict method; a missing one
// is Undefined), Python slicing and iteration, and the methods of str, dict
// and list that templates call (s.strip(), d.items(), ...). Plain C++.
#include <optional>
#include <string>

#include "stratum/data/jinja/budget.h"
#include "stratum/data/jinja/value.h"

namespace stratum::data::jinja {

// obj.name; throws ValueError when obj itself is Undefined.
Value get_attribute(const Value& obj, const std::string& name, Budget& budget);
// obj[key]; throws ValueError when obj is Undefined.
Value get_item(const Value& obj, const Value& key, Budget& budget);
// obj[start:stop:step] for a str or list (None or Undefined bounds are open).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, Budget& budget);
// What `for x in obj` walks: a list's items, a dict's keys, a str's code
// points, nothing for Undefined. Throws ValueError for what is not iterable.
List iterate(const Value& obj);
// The items a "sequence" filter reads (iterate, but None is an error too).
inline List as_sequence(const Value& obj) { return iterate(obj); }

}  // namespace stratum::data::jinja
