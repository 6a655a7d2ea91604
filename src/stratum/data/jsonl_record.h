#pragma once
// JSON Lines records ({"text": ...} per line) as they come from others' files:
// each line length-capped while it is read, each record parsed by the shared
// reader of untrusted JSON (core/json_file.h: nesting capped, a key given
// twice refused). Plain C++, no torch (the fuzz build links it).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace stratum::data {

// One line of a JSON Lines corpus may hold a whole document, but a file with
// no newline must not grow memory without bound.
inline constexpr size_t kMaxJsonlLineBytes = size_t{64} << 20;

// The document of one record: the string under "text". `where` names the
// line in messages ("corpus.jsonl:3 (byte 40)"). Throws stratum::Error
// "<where>[, column C]: ...": not JSON, nested too deep, a key given twice,
// not an object with a string "text".
std::string jsonl_document_text(std::string_view line, const std::string& where);

// "path:LINE (byte N)", the name of a line in messages.
std::string jsonl_line_name(const std::string& path, int64_t line_number, int64_t byte);

// Calls take(line, line_number, byte_offset) for each line of `file` (without
// its '\n'; the last line need not end in one), streamed in blocks. Throws
// stratum::Error naming `path`, the line and its byte when a line is longer
// than max_line_bytes, or on a read error.
void read_jsonl_lines(std::FILE* file, const std::string& path, size_t max_line_bytes,
                      const std::function<void(std::string_view line, int64_t line_number, int64_t byte)>& take);

}  // namespace stratum::data
