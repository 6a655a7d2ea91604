#include "stratum/data/jsonl_record.h"

#include <vector>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/json_file.h"

namespace stratum::data {
namespace {

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "; ") + p;
  return out;
}

// parse_json_text names its source "<where>:LINE:COL"; a record is one line,
// so only the column is worth keeping.
std::string record_position(const ConfigError& e, const std::string& where) {
  const std::string& source = e.source();
  if (source.size() <= where.size() || source.compare(0, where.size(), where) != 0) return where;
  const size_t colon = source.rfind(':');
  return where + ", column " + source.substr(colon + 1);
}

}  // namespace

std::string jsonl_line_name(const std::string& path, int64_t line_number, int64_t byte) {
  return path + ":" + std::to_string(line_number) + " (byte " + std::to_string(byte) + ")";
}

std::string jsonl_document_text(std::string_view line, const std::string& where) {
  nlohmann::json record;
  try {
    record = parse_json_text(line, where, "a JSON Lines record");
  } catch (const ConfigError& e) {
    throw Error(record_position(e, where) + ": not a JSON Lines record: " + join_problems(e.problems()));
  }
  if (!record.is_object()) throw Error(where + ": not an object with a string \"text\"");
  const auto text = record.find("text");
  if (text == record.end() || !text->is_string()) throw Error(where + ": not an object with a string \"text\"");
  return text->get<std::string>();
}

void read_jsonl_lines(std::FILE* file, const std::string& path, size_t max_line_bytes,
                      const std::function<void(std::string_view, int64_t, int64_t)>& take) {
  std::vector<char> block(size_t{1} << 16);
  std::string line;
  int64_t line_number = 1, line_start = 0;
  auto append = [&](const char* begin, size_t count) {
    if (line.size() + count > max_line_bytes)
      throw Error(jsonl_line_name(path, line_number, line_start) + ": line longer than " +
                  fs::describe_bytes(max_line_bytes) + " without a newline; a JSON Lines file holds one " +
                  "{\"text\": ...} record per line (split the document, or is this the right file?)");
    line.append(begin, count);
  };
  size_t got;
  while ((got = std::fread(block.data(), 1, block.size(), file)) > 0) {
    size_t from = 0;
    for (size_t i = 0; i < got; ++i) {
      if (block[i] != '\n') continue;
      append(block.data() + from, i - from);
      take(line, line_number, line_start);
      line_start += static_cast<int64_t>(line.size()) + 1;
      ++line_number;
      line.clear();
      from = i + 1;
    }
    append(block.data() + from, got - from);
  }
  if (std::ferror(file)) throw Error(path + ": read error at byte " + std::to_string(line_start + static_cast<int64_t>(line.size())));
  if (!line.empty()) take(line, line_number, line_start);
}

}  // namespace stratum::data
