#include "stratum/data/bounded_regex.h"

#include <algorithm>
#include <cstdint>

#include "stratum/core/error.h"

#ifdef STRATUM_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace stratum::data {

namespace detail {
void no_pcre2(const std::string& path) {
  throw Error(path + ": this build of Stratum has no PCRE2, which tokenizer.json's regular expressions need; install "
                     "libpcre2-dev (Debian/Ubuntu) and rebuild");
}
}  // namespace detail

#ifndef STRATUM_WITH_PCRE2

std::vector<std::string> split_by_pattern(const std::string&, std::string_view, size_t, const std::string& source) {
  detail::no_pcre2(source);
}

#else

namespace detail {
namespace {

// Regular expressions from the file: pattern size, parenthesis nesting, and
// what one pcre2_match call may spend: backtracking steps (a base plus some
// per byte of its window, as a run of n spaces costs ~n steps in a pattern
// like Llama-3's \s*[\r\n]+), depth and heap KiB.
constexpr size_t kMaxPatternBytes = 64 * 1024;
constexpr uint32_t kMaxPatternParens = 64;
constexpr uint64_t kMatchLimitBase = 20'000;
constexpr uint64_t kMatchLimitPerByte = 16;
constexpr uint32_t kMatchDepthLimit = 100'000;
constexpr uint32_t kMatchHeapKiB = 64 * 1024;

}  // namespace

// Regular expressions from the file, compiled and matched under limits.
struct Regex {
  pcre2_code* code = nullptr;
  pcre2_match_context* limits = nullptr;
  std::string where;  // "<file>: <key path>", for messages

  Regex(const std::string& pattern, bool literal, std::string where_) : where(std::move(where_)) {
    if (pattern.size() > kMaxPatternBytes)
      throw Error(where + ": the regular expression is " + std::to_string(pattern.size()) + " bytes, over the limit of " +
                  std::to_string(kMaxPatternBytes));
    pcre2_compile_context* compile = pcre2_compile_context_create(nullptr);
    pcre2_set_parens_nest_limit(compile, kMaxPatternParens);
    pcre2_set_max_pattern_length(compile, kMaxPatternBytes);
    int error = 0;
    PCRE2_SIZE offset = 0;
    // PCRE2_LITERAL refuses PCRE2_UCP, which a literal does not need.
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                         compile);
    pcre2_compile_context_free(compile);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw Error(where + ": the regular expression does not compile at offset " + std::to_string(offset) + ": " +
                  reinterpret_cast<const char*>(message));
    }
    // Where JIT is unavailable the interpreter runs, under the same limits.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
    limits = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(limits, kMatchLimitBase);
    pcre2_set_depth_limit(limits, kMatchDepthLimit);
    pcre2_set_heap_limit(limits, kMatchHeapKiB);
  }
  ~Regex() {
    pcre2_match_context_free(limits);
    pcre2_code_free(code);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

namespace {

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

size_t next_character(std::string_view text, size_t at) {
  ++at;
  while (at < text.size() && continuation_byte(text[at])) ++at;
  return at;
}

// Matches one regular expression over a text window by window, so that the
// bytes each match call may read are known and charged to the budget.
//
// A call sees text[0, end) and starts at `from` (earlier text stays visible
// to lookbehind) with PCRE2_PARTIAL_HARD unless end is the text's end: a
// complete match is then exactly the whole text's match (no path before it
// reached the window's end), NOMATCH means no match starts before `end`, and
// a partial match at p means the attempt at p needs more text; p alone is
// then retried anchored in doubling windows. Unanchored calls are charged the
// bytes they advance over (each reads at most a window past its start),
// anchored ones their whole window.
class WindowedMatcher {
 public:
  WindowedMatcher(const Regex& regex, std::string_view text, size_t window, WorkBudget& budget)
      : regex_(regex), text_(text), window_(std::max<size_t>(window, 1)), budget_(budget),
        match_(pcre2_match_data_create_from_pattern(regex.code, nullptr)),
        limits_(pcre2_match_context_copy(regex.limits)) {
    if (!match_ || !limits_) throw Error(regex.where + ": out of memory for a regular expression match");
  }
  ~WindowedMatcher() {
    pcre2_match_context_free(limits_);
    pcre2_match_data_free(match_);
  }
  WindowedMatcher(const WindowedMatcher&) = delete;
  WindowedMatcher& operator=(const WindowedMatcher&) = delete;

  // The first match starting at or after `from`: true and [begin, end), or false.
  bool find(size_t from, size_t& begin, size_t& end) {
    while (from <= text_.size()) {
      const size_t stop = window_end(from, window_);
      const int rc = run(from, stop, 0);
      if (rc >= 0) {
        read_match(begin, end);
        charge(std::max(end, begin) - std::min(from, begin), begin);
        return true;
      }
      if (rc == PCRE2_ERROR_NOMATCH) {
        charge(stop - from, from);
        if (stop == text_.size()) return false;
        from = stop;
        continue;
      }
      // Partial: the attempt at p reached the window's end.
      const size_t p = std::clamp<size_t>(pcre2_get_ovector_pointer(match_)[0], from, stop);
      charge(p - from, p);
      if (resolve_at(p, stop, begin, end)) return true;
      if (p >= text_.size()) return false;
      from = next_character(text_, p);
    }
    return false;
  }

 private:
  // Min(text end, from + size), moved forward to a character boundary.
  size_t window_end(size_t from, size_t size) const {
    size_t stop = size >= text_.size() - from ? text_.size() : from + size;
    while (stop < text_.size() && continuation_byte(text_[stop])) ++stop;
    return stop;
  }

  int run(size_t from, size_t stop, uint32_t options) {
    if (stop < text_.size()) options |= PCRE2_PARTIAL_HARD;
    const uint64_t steps = kMatchLimitBase + kMatchLimitPerByte * (stop - from);
    pcre2_set_match_limit(limits_, static_cast<uint32_t>(std::min<uint64_t>(steps, UINT32_MAX)));
    const int rc = pcre2_match(regex_.code, reinterpret_cast<PCRE2_SPTR>(text_.data()), stop, from,
                               options | PCRE2_NO_UTF_CHECK, match_, limits_);
    if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) return rc;
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    throw Error(regex_.where + ": the regular expression failed at byte " + std::to_string(from) + " of a " +
                std::to_string(text_.size()) + "-byte piece of the text: " + reinterpret_cast<const char*>(message) +
                " (it backtracks too much: simplify the pattern)");
  }

  // The attempt at p alone, in windows doubling from twice `stop - p`.
  bool resolve_at(size_t p, size_t stop, size_t& begin, size_t& end) {
    size_t size = std::max<size_t>(2 * (stop - p), 2 * window_);
    while (true) {
      const size_t limit = window_end(p, size);
      const int rc = run(p, limit, PCRE2_ANCHORED);
      charge(limit - p, p);
      if (rc >= 0) {
        read_match(begin, end);
        return true;
      }
      if (rc == PCRE2_ERROR_NOMATCH) return false;
      size = size > text_.size() ? text_.size() : 2 * size;
    }
  }

  void read_match(size_t& begin, size_t& end) const {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_);
    begin = std::min<size_t>(ov[0], text_.size());
    end = std::clamp<size_t>(ov[1], begin, text_.size());  // \K may put the start after the end
  }

  void charge(uint64_t bytes, size_t at) {
    budget_.used += bytes;
    if (budget_.used <= budget_.limit) return;
    throw Error(regex_.where + ": the regular expression needs more work than the text allows: " +
                std::to_string(budget_.used) + " bytes read for a text of " + std::to_string(text_.size()) +
                " bytes (limit " + std::to_string(budget_.limit) + "), at byte " + std::to_string(at) +
                "; the pattern reads ahead to the end of the text at every match (e.g. an unbounded lookahead or "
                "a repetition followed by something the text lacks): bound it");
  }

  const Regex& regex_;
  std::string_view text_;
  size_t window_;
  WorkBudget& budget_;
  pcre2_match_data* match_;
  pcre2_match_context* limits_;  // the regex's, with a match limit for each call's window
};

}  // namespace

std::shared_ptr<const Regex> compile_regex(const std::string& pattern, bool literal, std::string where) {
  return std::make_shared<const Regex>(pattern, literal, std::move(where));
}

void split_regex(const Regex& regex, bool remove, std::string_view text, size_t window, WorkBudget& budget,
                 std::vector<std::string_view>& out) {
  budget.limit += kBudgetPerByte * text.size();
  WindowedMatcher matcher(regex, text, window, budget);
  size_t start = 0, last = 0, b = 0, e = 0;
  while (start < text.size() && matcher.find(start, b, e)) {
    if (e == b) {  // an empty match: step over one character
      start = next_character(text, std::max(b, start));
      continue;
    }
    if (b > last) out.push_back(text.substr(last, b - last));
    if (!remove) out.push_back(text.substr(b, e - b));
    last = start = e;
  }
  if (last < text.size()) out.push_back(text.substr(last));
}

}  // namespace detail

std::vector<std::string> split_by_pattern(const std::string& pattern, std::string_view text, size_t window_bytes,
                                          const std::string& source) {
  const detail::Regex regex(pattern, false, source);
  detail::WorkBudget budget;
  std::vector<std::string_view> cut;
  detail::split_regex(regex, false, text, window_bytes, budget, cut);
  return std::vector<std::string>(cut.begin(), cut.end());
}

#endif

}  // namespace stratum::data
