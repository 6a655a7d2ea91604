#pragma once
// Regular expressions from a file (tokenizer.json's pre-tokenizer patterns)
// are untrusted: they are compiled and matched under limits, on PCRE2 with
// Unicode classes. The pattern's size and nesting are capped, each match call
// has PCRE2's step, depth and heap limits, and the bytes all match calls over
// one text may read are summed against a budget proportional to the text, so
// a pattern that reads ahead to the end of the text at every match is an
// error, not a quadratic hang. Matching runs window by window to know those
// bytes (WindowedMatcher in bounded_regex.cpp says how). Plain C++, no torch.
//
// A build without PCRE2 (no STRATUM_WITH_PCRE2) defines only
// split_by_pattern and no_pcre2, and both throw saying what to install.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace stratum::data {

// The pieces a Split pattern (behaviour Isolated) cuts `text` into, matched as
// encode() matches it: window by window of `window_bytes`, under the same
// work budget. Throws stratum::Error naming `source`. Tests compare window
// sizes with this; the tokenizer uses kRegexWindowBytes.
std::vector<std::string> split_by_pattern(const std::string& pattern, std::string_view text, size_t window_bytes,
                                          const std::string& source = "pattern");
inline constexpr size_t kRegexWindowBytes = 256;

namespace detail {

// The budget of one encode() for its regular expressions: the bytes each
// match call may read, summed, at most kBudgetPerByte per byte split plus
// kBudgetBaseBytes. Real patterns read ~1-3 bytes per byte (see the tests); a
// pattern that reads ahead to the end of the text at every match needs ~n^2.
inline constexpr uint64_t kBudgetPerByte = 16;
inline constexpr uint64_t kBudgetBaseBytes = uint64_t{1} << 20;

// The bytes the regular expressions of one encode() may read, summed.
struct WorkBudget {
  uint64_t limit = kBudgetBaseBytes, used = 0;
};

// A compiled pattern with its match limits; PCRE2's types stay in bounded_regex.cpp.
struct Regex;

// `pattern` compiled with UTF and Unicode classes, or as a literal string.
// Throws stratum::Error naming `where` ("<file>: <key path>"), as every later
// match error does, when the pattern is too long, nests too deep or does not
// compile.
std::shared_ptr<const Regex> compile_regex(const std::string& pattern, bool literal, std::string where);

// Cuts `text` at the regular expression's matches: the text between them,
// and the matches themselves unless `remove`. Empty matches cut nothing.
// Raises budget.limit by kBudgetPerByte per byte of `text`, then charges the
// bytes read; throws stratum::Error naming the pattern when it runs out.
void split_regex(const Regex& regex, bool remove, std::string_view text, size_t window, WorkBudget& budget,
                 std::vector<std::string_view>& out);

// The error of a build without PCRE2, naming the file that needed it.
[[noreturn]] void no_pcre2(const std::string& path);

}  // namespace detail
}  // namespace stratum::data
