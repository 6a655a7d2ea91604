#include "stratum/data/jinja/text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace stratum::data::jinja {

void decode_utf8(std::string_view s, std::vector<char32_t>* cps, std::vector<size_t>* offsets) {
  if (cps) cps->reserve(s.size());
  if (offsets) offsets->reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) {
      const auto cont = static_cast<unsigned char>(s[i + k]);
      if ((cont & 0xC0) != 0x80) ok = false;
      c = (c << 6) | (cont & 0x3F);
    }
    if (offsets) offsets->push_back(i);
    if (cps) cps->push_back(ok ? c : b);  // an invalid byte stands for itself
    i += ok ? n : 1;
  }
  if (offsets) offsets->push_back(s.size());
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  decode_utf8(s, &out, nullptr);
  return out;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  decode_utf8(s, nullptr, &out);
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t code_point_count(std::string_view s) { return is_ascii(s) ? s.size() : code_point_offsets(s).size() - 1; }

bool is_py_space(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

template <typename Keep>
std::string strip_if(std::string_view s, bool left, bool right, Keep is_stripped) {
  std::vector<char32_t> cps;
  std::vector<size_t> at;
  decode_utf8(s, &cps, &at);
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && is_stripped(cps[b])) ++b;
  if (right)
    while (e > b && is_stripped(cps[e - 1])) --e;
  return std::string(s.substr(at[b], at[e] - at[b]));
}

}  // namespace

std::string py_strip(std::string_view s, bool left, bool right) {
  return strip_if(s, left, right, [](char32_t c) { return is_py_space(c); });
}

std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  const std::vector<char32_t> set = code_points(chars);
  return strip_if(s, left, right, [&](char32_t c) {
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  });
}

namespace {

// The code point whose UTF-8 starts at s[i] and its length; an invalid byte is itself, length 1.
std::pair<char32_t, size_t> code_point_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return {b, 1};
  char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto cont = static_cast<unsigned char>(s[i + k]);
    if ((cont & 0xC0) != 0x80) return {b, 1};
    c = (c << 6) | (cont & 0x3F);
  }
  return {c, n};
}

}  // namespace

// Both scan only the whitespace they measure (the lexer calls them at every token).
size_t leading_space_bytes(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto [c, n] = code_point_at(s, i);
    if (!is_py_space(c)) break;
    i += n;
  }
  return i;
}

size_t trailing_space_bytes(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;  // back to the lead byte of the last code point
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    auto [c, n] = code_point_at(s, start);
    if (start + n != end) {  // not one whole code point: the last byte stands alone
      start = end - 1;
      c = static_cast<unsigned char>(s[start]);
    }
    if (!is_py_space(c)) break;
    end = start;
  }
  return s.size() - end;
}

std::string py_float_str(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, laid out as Python's repr: fixed
  // notation for exponents in [-4, 16), scientific (two exponent digits at
  // least) outside.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e_at = sci.find('e');
  std::string digits = sci.substr(0, e_at);
  const int exponent = std::stoi(sci.substr(e_at + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
  return out + exp;
}

std::string json_float_str(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return py_float_str(v);
}

namespace {

// str.isprintable() for the code points a chat is likely to hold: controls,
// separators other than the space, format characters and unassigned planes
// are not printable (a full Unicode table is a stated limit).
bool is_py_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064))
    return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF)) return false;
  if (c >= 0xFFF9 && c <= 0xFFFB) return false;
  if (c > 0x10FFFF || (c >= 0xF0000)) return false;
  return true;
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, width, v);
  out += buf;
}

}  // namespace

std::string py_repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : code_points(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_py_printable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      append_hex(out, "\\x", c, 2);
    } else if (c <= 0xFFFF) {
      append_hex(out, "\\u", c, 4);
    } else {
      append_hex(out, "\\U", c, 8);
    }
  }
  out += quote;
  return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  auto put_u = [&](uint32_t v) { append_hex(out, "\\u", v, 4); };
  for (char32_t c : code_points(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      put_u(c);
    } else if (ensure_ascii && c >= 0x7F) {
      if (c >= 0x10000) {
        const uint32_t v = c - 0x10000;
        put_u(0xD800 + (v >> 10));
        put_u(0xDC00 + (v & 0x3FF));
      } else {
        put_u(c);
      }
    } else {
      append_utf8(out, c);
    }
  }
  out += '"';
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

namespace {
bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
}  // namespace

std::string py_title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (is_ascii_alpha(c)) {
      c = previous_cased ? ascii_lower(std::string(1, c))[0] : ascii_upper(std::string(1, c))[0];
      previous_cased = true;
    } else if (u < 0x80) {
      previous_cased = false;
    }  // a non-ASCII byte leaves the state as it is (a stated limit)
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

}  // namespace stratum::data::jinja
