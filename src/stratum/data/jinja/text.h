#pragma once
// Python's view of text, for the Jinja subset: strings are UTF-8 here but
// indexed, sliced and measured in code points as Python's str is; whitespace
// is str.isspace()'s; numbers print as Python's str() and json.dumps print
// them. Plain C++.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stratum::data::jinja {

// Code points of valid or invalid UTF-8: an invalid byte decodes to itself
// (0x80..0xFF) so that no input is lost or crashes a render.
void decode_utf8(std::string_view s, std::vector<char32_t>* cps, std::vector<size_t>* offsets);
std::vector<char32_t> code_points(std::string_view s);
// The byte offset of each code point, then s.size(): slices cut bytes there.
std::vector<size_t> code_point_offsets(std::string_view s);
void append_utf8(std::string& out, char32_t c);
// Number of code points (each invalid byte counts as one).
size_t code_point_count(std::string_view s);
bool is_ascii(std::string_view s);

// str.isspace() for one code point.
bool is_py_space(char32_t c);
// str.strip()/lstrip()/rstrip() with no argument (Unicode whitespace), or
// with `chars` (any of those code points).
std::string py_strip(std::string_view s, bool left, bool right);
std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right);
// The byte length of the whitespace at the start / end of s.
size_t leading_space_bytes(std::string_view s);
size_t trailing_space_bytes(std::string_view s);

// Python's str() of a float ("1.0", "1e+16", "0.30000000000000004", "inf").
std::string py_float_str(double v);
// json.dumps of a float ("Infinity", "NaN", else as py_float_str).
std::string json_float_str(double v);
// Python's repr() of a str: quotes chosen as Python does, escapes for
// backslash, the quote, \t \n \r and unprintable code points.
std::string py_repr_string(std::string_view s);
// json.dumps of a str with ensure_ascii false (or true: every non-ASCII code
// point as \uXXXX, surrogate pairs above U+FFFF).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

// Python's str.title() / str.capitalize() / upper() / lower() for ASCII
// letters; other code points are kept (a limit stated in chat_template.h).
std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);

}  // namespace stratum::data::jinja
