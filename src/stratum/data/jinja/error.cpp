#include "stratum/data/jinja/error.h"

#include <algorithm>

#include "stratum/data/jinja/text.h"

namespace stratum::data::jinja {

std::string position(const Source& source, size_t offset) {
  offset = std::min(offset, source.text.size());
  const std::string_view before(source.text.data(), offset);
  const size_t line = static_cast<size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
  const size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  const size_t column = code_point_count(before.substr(line_start)) + 1;
  return source.name + " line " + std::to_string(line) + ", column " + std::to_string(column);
}

void fail_at(const Source& source, size_t offset, const std::string& message) {
  throw TemplateError(position(source, offset) + ": " + message);
}

}  // namespace stratum::data::jinja
