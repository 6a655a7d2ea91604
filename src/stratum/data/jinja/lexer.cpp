#include "stratum/data/jinja/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "stratum/data/jinja/text.h"

namespace stratum::data::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// The byte length of the Python whitespace (\s) starting at pos.
size_t space_run(const std::string& s, size_t pos) { return leading_space_bytes(std::string_view(s).substr(pos)); }

// Python's unicode-escape decoding of a string literal's body, as jinja2
// decodes it: \n \t \r \\ \' \" \a \b \f \v \ooo \xhh \uhhhh \Uhhhhhhhh, a
// backslash-newline dropped, any other escape kept as written.
std::string decode_string(const Source& source, size_t at, std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;
      case 'x': case 'u': case 'U': {
        const size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (size_t k = 1; k <= digits; ++k) {
          const char h = i + k < body.size() ? body[i + k] : '\0';
          const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          if (d < 0) fail_at(source, at, "a string literal has a truncated \\" + std::string(1, c) + " escape");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        if (v > 0x10FFFF) fail_at(source, at, "a string literal escapes a code point beyond U+10FFFF");
        append_utf8(out, v);
        i += digits;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k) v = v * 8 + (body[i + k] - '0');
          append_utf8(out, v);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const Source& source) : source_(source), s_(source.text) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        push(Token::Type::Data, s_.substr(pos_), pos_);
        break;
      }
      const char kind = s_[tag + 1];
      const char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : '\0';
      std::string text = s_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text.resize(text.size() - trailing_space_bytes(text));
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: the tag alone on its line from its left
        const size_t line = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line > 0 || line_starting_) && line < text.size() &&
            leading_space_bytes(std::string_view(text).substr(line)) == text.size() - line)
          text.resize(line);
      }
      push(Token::Type::Data, text, pos_);
      const size_t body = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        comment(tag, body);
      } else if (kind == '%' && raw(tag, body)) {
      } else {
        tag_tokens(kind == '{', tag, body);
      }
    }
    if (!balance_.empty()) fail_at(source_, s_.size(), "unclosed '" + std::string(1, balance_.back()) + "'");
    tokens_.push_back(Token{Token::Type::End, "", 0, 0, s_.size()});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1))
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  void push(Token::Type type, std::string text, size_t offset) {
    if (type == Token::Type::Data && text.empty()) return;
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.offset = offset;
    tokens_.push_back(std::move(t));
  }

  // After a block or comment end: "+" keeps what follows, "-" strips the
  // whitespace after it, else trim_blocks drops one newline.
  void after_block_end(size_t end_at, char sign) {
    size_t next = end_at;
    if (sign == '-') {
      next += space_run(s_, next);
    } else if (sign != '+' && next < s_.size() && s_[next] == '\n') {
      ++next;
    }
    line_starting_ = next > 0 && s_[next - 1] == '\n';
    pos_ = next;
  }

  void comment(size_t tag, size_t body) {
    const size_t close = s_.find("#}", body);
    if (close == std::string::npos) fail_at(source_, tag, "missing end of comment tag '#}'");
    const char sign = close > body && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : '\0';
    after_block_end(close + 2, sign);
  }

  // {% raw %} ... {% endraw %}: the text between is data, tags and all.
  bool raw(size_t tag, size_t body) {
    size_t p = body + space_run(s_, body);
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && is_name_char(s_[p + 3]))) return false;
    p += 3;
    p += space_run(s_, p);
    if (s_.compare(p, 3, "-%}") == 0) {
      p += 3;
      p += space_run(s_, p);
    } else if (s_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      fail_at(source_, tag, "'raw' takes no arguments");
    }
    for (size_t end = s_.find("{%", p); end != std::string::npos; end = s_.find("{%", end + 2)) {
      const char sign = end + 2 < s_.size() && (s_[end + 2] == '-' || s_[end + 2] == '+') ? s_[end + 2] : '\0';
      size_t q = end + 2 + (sign ? 1 : 0);
      q += space_run(s_, q);
      if (s_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      q += space_run(s_, q);
      char close_sign = '\0';
      if (s_.compare(q, 3, "-%}") == 0 || s_.compare(q, 3, "+%}") == 0) {
        close_sign = s_[q];
        q += 3;
      } else if (s_.compare(q, 2, "%}") == 0) {
        q += 2;
      } else {
        continue;
      }
      std::string text = s_.substr(p, end - p);
      if (sign == '-') {
        text.resize(text.size() - trailing_space_bytes(text));
      } else if (sign != '+') {
        const size_t line = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (line > 0 && line < text.size() && leading_space_bytes(std::string_view(text).substr(line)) == text.size() - line)
          text.resize(line);
      }
      push(Token::Type::Data, text, p);
      after_block_end(q, close_sign);
      return true;
    }
    fail_at(source_, tag, "missing end of raw directive '{% endraw %}'");
  }

  void tag_tokens(bool variable, size_t tag, size_t body) {
    push(variable ? Token::Type::VariableBegin : Token::Type::BlockBegin, "", tag);
    size_t p = body;
    for (;;) {
      p += space_run(s_, p);
      if (p >= s_.size())
        fail_at(source_, tag, std::string("unclosed ") + (variable ? "'{{': missing '}}'" : "'{%': missing '%}'"));
      if (balance_.empty()) {  // an end tag counts only outside brackets, as in jinja2
        if (variable && (s_.compare(p, 3, "-}}") == 0 || s_.compare(p, 2, "}}") == 0)) {
          const bool strip = s_[p] == '-';
          push(Token::Type::VariableEnd, "", p);
          p += strip ? 3 : 2;
          if (strip) p += space_run(s_, p);
          line_starting_ = p > 0 && s_[p - 1] == '\n';
          pos_ = p;
          return;
        }
        if (!variable && ((s_.compare(p, 3, "-%}") == 0 || s_.compare(p, 3, "+%}") == 0) || s_.compare(p, 2, "%}") == 0)) {
          const char sign = s_[p] == '%' ? '\0' : s_[p];
          push(Token::Type::BlockEnd, "", p);
          after_block_end(p + (sign ? 3 : 2), sign);
          return;
        }
      }
      p = one_token(p);
    }
  }

  size_t one_token(size_t p) {
    const char c = s_[p];
    if (is_digit(c)) return number(p);
    if (is_name_start(c)) {
      size_t e = p;
      while (e < s_.size() && is_name_char(s_[e])) ++e;
      push(Token::Type::Name, s_.substr(p, e - p), p);
      return e;
    }
    if (c == '\'' || c == '"') {
      size_t e = p + 1;
      while (e < s_.size() && s_[e] != c) e += s_[e] == '\\' ? 2 : 1;
      if (e >= s_.size()) fail_at(source_, p, "unterminated string literal");
      push(Token::Type::String, decode_string(source_, p, std::string_view(s_).substr(p + 1, e - p - 1)), p);
      return e + 1;
    }
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo)
      if (s_.compare(p, 2, op) == 0) {
        push(Token::Type::Operator, op, p);
        return p + 2;
      }
    static const std::string kOne = "+-/*%~[](){}<>=.:|,;";
    if (kOne.find(c) == std::string::npos) fail_at(source_, p, "unexpected character " + py_repr_string(std::string(1, c)));
    if (c == '(' || c == '[' || c == '{') balance_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance_.empty()) fail_at(source_, p, std::string("unexpected '") + c + "'");
      if (balance_.back() != c)
        fail_at(source_, p, std::string("unexpected '") + c + "', expected '" + balance_.back() + "'");
      balance_.pop_back();
    }
    push(Token::Type::Operator, std::string(1, c), p);
    return p + 1;
  }

  // jinja2's integer and float literals (digits with '_' separators, a
  // fraction and/or an exponent); a number right after '.' is an integer
  // (foo.0.bar is foo[0].bar).
  size_t number(size_t p) {
    auto digits = [&](size_t q) {
      size_t e = q;
      while (e < s_.size() && (is_digit(s_[e]) || (s_[e] == '_' && e > q && e + 1 < s_.size() && is_digit(s_[e + 1])))) ++e;
      return e;
    };
    size_t e = digits(p);
    bool is_float = false;
    const bool after_dot = p > 0 && s_[p - 1] == '.';
    if (!after_dot) {
      if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
        e = digits(e + 1);
        is_float = true;
      }
      if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
        size_t q = e + 1;
        if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
        if (q < s_.size() && is_digit(s_[q])) {
          e = digits(q);
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t i = p; i < e; ++i)
      if (s_[i] != '_') text += s_[i];
    Token t;
    t.offset = p;
    t.text = text;
    if (is_float) {
      t.type = Token::Type::Float;
      t.number = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = Token::Type::Integer;
      errno = 0;
      t.integer = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail_at(source_, p, "integer literal " + text + " is beyond 64 bits");
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  const Source& source_;
  const std::string& s_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::string balance_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_template_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      out += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      out += text[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const Source& source) { return Lexer(source).run(); }

}  // namespace stratum::data::jinja
